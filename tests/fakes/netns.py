"""Test hosts in network namespaces joined by a veth pair, on loopback-range addresses.

Everything a test creates here it removes, even when it fails half-way."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


def sh(*args: str, timeout: float = 30) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=timeout).stdout


@dataclass(frozen=True)
class VethPair:
    ns_a: str
    ns_b: str
    dev_a: str
    dev_b: str
    addr_a: str
    addr_b: str

    def exec_a(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns_a, *args]

    def exec_b(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns_b, *args]


@contextmanager
def veth_pair(subnet: str = "127.231.0", mtu: int = 9000) -> Iterator[VethPair]:
    """Two namespaces, ``<subnet>.1/30`` on side A and ``.2`` on side B."""
    tag = f"{os.getpid() % 100000}"
    pair = VethPair(f"na-a-{tag}", f"na-b-{tag}", f"nava{tag}", f"navb{tag}", f"{subnet}.1", f"{subnet}.2")
    created: list[str] = []
    try:
        for ns in (pair.ns_a, pair.ns_b):
            sh("ip", "netns", "add", ns)
            created.append(ns)
        sh("ip", "link", "add", pair.dev_a, "type", "veth", "peer", "name", pair.dev_b)
        for ns, dev, addr in ((pair.ns_a, pair.dev_a, pair.addr_a), (pair.ns_b, pair.dev_b, pair.addr_b)):
            sh("ip", "link", "set", dev, "netns", ns)
            # 127.0.0.0/8 on a non-loopback device needs route_localnet in that namespace.
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1")
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.conf.{dev}.route_localnet=1")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{addr}/30", "dev", dev)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", dev, "mtu", str(mtu), "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield pair
    finally:
        for ns in created:
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True, timeout=30)


def shape(pair: VethPair, rate: str) -> None:
    """Limit what side A sends to ``rate`` (tc token bucket, e.g. ``200mbit``)."""
    sh(*pair.exec_a("tc", "qdisc", "add", "dev", pair.dev_a, "root", "tbf", "rate", rate,
                    "burst", "256kb", "latency", "50ms"))  # fmt: skip
