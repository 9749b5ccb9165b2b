"""What diag reads besides the collectors: the collector's gRPC health service (a real server on
loopback) and the kernel log's Xid lines."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from nodeagent.agent.diag.checks.collector import check as collector_check
from nodeagent.agent.diag.kernel_log import KMSG, XidRecord, parse_xids, pci_address, read_kernel_log
from nodeagent.agent.diag.model import Status
from tests.conftest import require
from tests.fakes.diag import host_tree, roots_args, run_diag


@pytest.fixture
def health_server() -> Iterator[tuple[str, health.HealthServicer]]:
    """A gRPC server on 127.0.0.1 with the standard health servicer, as a collector runs it."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    yield f"127.0.0.1:{port}", servicer
    server.stop(grace=None)


def test_serving_collector_passes(health_server: tuple[str, health.HealthServicer]) -> None:
    address, _ = health_server
    result = collector_check(address)
    assert (result.status, result.subject, result.value) == (Status.PASS, f"collector:{address}", "SERVING")


def test_not_serving_collector_warns(health_server: tuple[str, health.HealthServicer]) -> None:
    address, servicer = health_server
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    result = collector_check(address)
    assert (result.status, result.value) == (Status.WARN, "NOT_SERVING")


def test_unreachable_collector_warns_within_the_timeout(health_server: tuple[str, health.HealthServicer]) -> None:
    address, _ = health_server
    host, _, port = address.rpartition(":")
    closed = f"{host}:{int(port) + 1 if int(port) < 65535 else int(port) - 1}"
    result = collector_check(closed, timeout_seconds=1.0)
    assert result.status is Status.WARN
    assert result.value.startswith(("UNAVAILABLE", "DEADLINE_EXCEEDED"))
    assert "is the collector" in result.hint


def test_collector_flag_and_profile_reach_the_check(
    health_server: tuple[str, health.HealthServicer], tmp_path: Path
) -> None:
    address, _ = health_server
    roots = host_tree(tmp_path / "host")
    common = [*roots_args(roots), "--window", "0", "--kernel-log", os.devnull, "--json"]
    by_flag = run_diag(*common, "--collector", address)
    assert by_flag.checks("collector.reachable", "PASS")[0]["subject"] == f"collector:{address}"
    profile = tmp_path / "fleet.toml"
    profile.write_text(f'[collector]\naddress = "{address}"\n')
    by_profile = run_diag(*common, "--profile", str(profile))
    assert by_profile.checks("collector.reachable", "PASS")
    assert run_diag(*common).checks("collector.reachable", "SKIP")


def test_xid_lines_of_dmesg_and_kmsg() -> None:
    lines = [
        "[ 8812.100000] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:B7:00): 48, pid=77, name=python, An uncorrectable double bit error",
        "NVRM: Xid (0000:07:00.0): 13, Graphics Exception",
        "[   1.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.133.20",
        "NVRM: GPU at PCI:0000:3b:00: GPU-5f0e1b2a",
    ]
    assert parse_xids(lines) == [
        XidRecord((0, 0x3B, 0), 79, "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."),
        XidRecord((0, 0xB7, 0), 48, "pid=77, name=python, An uncorrectable double bit error"),
        XidRecord((0, 0x07, 0), 13, "Graphics Exception"),
    ]
    assert pci_address("00000000:B7:00.0") == (0, 0xB7, 0) == pci_address("0000:b7:00")
    assert pci_address("garbage") is None


def test_kernel_log_from_a_file_or_the_reason_it_is_unreadable(tmp_path: Path) -> None:
    saved = tmp_path / "dmesg.txt"
    saved.write_text("[ 1.0] hello\n[ 2.0] NVRM: Xid (PCI:0000:3b:00): 79, gone\n")
    log = read_kernel_log(str(saved))
    assert (log.source, len(log.lines), log.unreadable_reason) == (str(saved), 2, "")
    missing = read_kernel_log(str(tmp_path / "none"))
    assert missing.source == "" and "No such file" in missing.unreadable_reason


def test_this_machines_kernel_log_is_read_whole_without_blocking() -> None:
    require(os.access(KMSG, os.R_OK), f"{KMSG} not readable here (needs root, and a container that exposes it)")
    log = read_kernel_log()
    assert log.source == KMSG, log.unreadable_reason
    assert log.lines and all("\n" not in line for line in log.lines)
    named = read_kernel_log(KMSG)  # as --kernel-log /dev/kmsg: read the records, do not wait for more
    assert named.source == KMSG and len(named.lines) >= len(log.lines) - 5
