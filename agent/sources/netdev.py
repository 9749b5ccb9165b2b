"""NICs: 64-bit counters from ``<procfs>/net/dev``, link facts from ``<sysfs>/class/net``.

Counters are host-wide (every process, every container sharing the netns). Virtual
interfaces (loopback, veth, bridges, container networks) are marked so the detector can
ignore them; bond members are linked to their bond so traffic is not counted twice.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from nodeagent.agent.kernel.files import list_dir
from nodeagent.agent.sources.base import Source, SourceContext
from nodeagent.agent.sources.registry import register
from nodeagent.core.quantities.units import nic_speed_bytes
from nodeagent.v1 import nodeagent_pb2 as pb

ARPHRD_LOOPBACK = 772
ARPHRD_INFINIBAND = 32
_VIRTUAL_PREFIXES = {
    "veth": "veth",
    "docker": "bridge",
    "virbr": "bridge",
    "br-": "bridge",
    "cni": "bridge",
    "cali": "veth",
    "flannel": "vxlan",
    "vxlan": "vxlan",
    "tun": "tun",
    "tap": "tun",
    "wg": "wireguard",
    "ifb": "ifb",
    "dummy": "dummy",
}


@dataclass(frozen=True, slots=True)
class NetDevCounters:
    rx_bytes: int
    rx_packets: int
    rx_errors: int
    rx_dropped: int
    tx_bytes: int
    tx_packets: int
    tx_errors: int
    tx_dropped: int


def parse_net_dev(text: str) -> dict[str, NetDevCounters]:
    """``/proc/net/dev``: two header lines, then ``name: 8 receive and 8 transmit fields``.
    Lines that do not parse are skipped (the rest still counts)."""
    result: dict[str, NetDevCounters] = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        fields = rest.split()
        if len(fields) < 16:
            continue
        try:
            v = [int(f) for f in fields[:16]]
        except ValueError:
            continue
        result[name.strip()] = NetDevCounters(
            rx_bytes=v[0], rx_packets=v[1], rx_errors=v[2], rx_dropped=v[3],
            tx_bytes=v[8], tx_packets=v[9], tx_errors=v[10], tx_dropped=v[11],
        )  # fmt: skip
    return result


@register
class NetDevSource(Source):
    name = "netdev"
    help = "NIC counters (net/dev) and link state, speed, MTU (class/net)"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self._known: set[str] = set()
        # Interfaces whose sysfs attributes are read every tick: physical NICs, bonds and
        # interfaces with a configured speed. A Kubernetes node can have hundreds of veths.
        self._watched: set[str] = set()
        self._virtual: set[str] = set()

    def scan(self, info: pb.NodeInfo) -> None:
        roots, files = self.ctx.roots, self.ctx.files
        class_dir = roots.sys("class", "net")
        names = [n for n in list_dir(class_dir) if os.path.isdir(os.path.join(class_dir, n))]
        text = files.read_text(roots.proc("net", "dev"))
        counters = parse_net_dev(text) if text is not None else {}
        masters: dict[str, str] = {}
        entries: dict[str, pb.NicInfo] = {}
        for name in sorted(set(names) | set(counters)):
            nic = self._describe(name, class_dir if name in names else None)
            entries[name] = nic
            for member in nic.bond_members:
                masters[member] = name
        for member, master in masters.items():
            if member in entries:
                entries[member].bond_master = master
        del info.nics[:]
        info.nics.extend(entries.values())
        self._known = set(entries)
        self._virtual = {n for n, e in entries.items() if e.virtual}
        self._watched = {
            n for n, e in entries.items()
            if n in names and (not e.virtual or e.kind == "bond" or n in self.ctx.config.link_speeds)
        }  # fmt: skip

    def collect(self, report: pb.NodeReport) -> None:
        roots, files = self.ctx.roots, self.ctx.files
        text = files.read_text(roots.proc("net", "dev"))
        if text is None:
            return
        speeds = self.ctx.config.link_speeds
        for name, c in parse_net_dev(text).items():
            if name not in self._known:
                self.needs_rescan = True
            nic = report.nics.add(
                name=name,
                rx_bytes_total=c.rx_bytes, tx_bytes_total=c.tx_bytes,
                rx_packets_total=c.rx_packets, tx_packets_total=c.tx_packets,
                rx_errors_total=c.rx_errors, tx_errors_total=c.tx_errors,
                rx_dropped_total=c.rx_dropped, tx_dropped_total=c.tx_dropped,
            )  # fmt: skip
            if name in speeds:
                nic.speed_bytes_per_second = speeds[name]
            if name not in self._watched:
                continue
            base = roots.sys("class", "net", name)
            operstate = files.read_str(f"{base}/operstate")
            if operstate is not None:
                nic.operstate = operstate
            carrier = files.read_int(f"{base}/carrier")
            if carrier is not None:
                nic.carrier = carrier == 1
            changes = files.read_int(f"{base}/carrier_changes")
            if changes is not None:
                nic.carrier_changes_total = changes
            if name not in speeds:
                speed = nic_speed_bytes(files.read_int(f"{base}/speed"))
                if speed is not None:
                    nic.speed_bytes_per_second = speed
            mtu = files.read_int(f"{base}/mtu")
            if mtu is not None:
                nic.mtu = mtu

    def _describe(self, name: str, class_dir: str | None) -> pb.NicInfo:
        files = self.ctx.files
        nic = pb.NicInfo(name=name)
        configured = self.ctx.config.link_speeds.get(name)
        if class_dir is None:
            nic.kind, nic.virtual = _kind_from_name(name)
        else:
            base = os.path.join(class_dir, name)
            nic.kind, nic.virtual = _kind_from_sysfs(name, base, files.read_int(f"{base}/type"))
            slaves = files.read_str(f"{base}/bonding/slaves")
            if slaves:
                nic.bond_members.extend(slaves.split())
            mtu = files.read_int(f"{base}/mtu")
            if mtu is not None:
                nic.mtu = mtu
            nic.address = files.read_str(f"{base}/address") or ""
            kernel_speed = nic_speed_bytes(files.read_int(f"{base}/speed"))
            if configured is None and kernel_speed is not None:
                nic.speed_bytes_per_second = kernel_speed
                nic.speed_source = "kernel"
        if configured is not None:
            nic.speed_bytes_per_second = configured
            nic.speed_source = "config"
        return nic


def _kind_from_sysfs(name: str, base: str, arp_type: int | None) -> tuple[str, bool]:
    if name == "lo" or arp_type == ARPHRD_LOOPBACK:
        return "loopback", True
    if os.path.isdir(f"{base}/bonding"):
        return "bond", True
    if os.path.isdir(f"{base}/bridge"):
        return "bridge", True
    if os.path.exists(f"{base}/tun_flags"):
        return "tun", True
    virtual = "/devices/virtual/" in os.path.realpath(base)
    if arp_type == ARPHRD_INFINIBAND:
        return "ipoib", virtual
    if virtual:
        kind, _ = _kind_from_name(name)
        return (kind if kind != "unknown" else "virtual"), True
    if "." in name:
        return "vlan", True
    return "physical", False


def _kind_from_name(name: str) -> tuple[str, bool]:
    if name == "lo":
        return "loopback", True
    for prefix, kind in _VIRTUAL_PREFIXES.items():
        if name.startswith(prefix):
            return kind, True
    return "unknown", False
