"""The agent's host families are node_exporter's: same names, HELP, TYPE, labels and values.

A real node_exporter 1.5 (Debian) and the agent's sampler read the same fixture tree
(../shared/fixtures/node_exporter, plus prometheus/procfs's ``net/dev``, which node_exporter's
tree lacks, and ``net/snmp``/``net/netstat`` written here in the kernel's format, as a 6.1 kernel
writes them); the two scrapes are compared family by family.
"""

from __future__ import annotations

import math
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.agent.delivery.spool import Spool
from nodeagent.agent.exposition.page import AgentExposition, AgentMetrics, AgentTelemetry
from nodeagent.agent.sources import Roots
from tests.conftest import require
from tests.fakes.trees import materialize

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


_NETCLASS = {
    "node_network_up",
    "node_network_carrier",
    "node_network_carrier_changes_total",
    "node_network_speed_bytes",
    "node_network_mtu_bytes",
}


def _known_missing(name: str, labels: frozenset[tuple[str, str]]) -> bool:
    """What node_exporter shows on this tree that the agent does not, each for a reason."""
    device = dict(labels).get("device", "")
    # The two trees come from two projects: class/net has bond0, dmz and int, which procfs's net/dev
    # does not list. The agent samples the interfaces net/dev lists (on a real node, every one).
    if name in _NETCLASS and device in {"bond0", "dmz", "int"}:
        return True
    # Partitions are not disks to the agent; node_exporter's default exclusion regex knows sdXN and
    # nvmeXnYpZ but not mmcblkXpY.
    return name.startswith("node_disk_") and device in {"mmcblk0p1", "mmcblk0p2"}


@pytest.fixture(scope="module")
def tree(shared_fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = materialize(shared_fixtures / "node_exporter", tmp_path_factory.mktemp("ne-cmp") / "tree")
    (root / "proc" / "net").mkdir(exist_ok=True)
    shutil.copy(shared_fixtures / "procfs" / "proc" / "net" / "dev", root / "proc" / "net" / "dev")
    (root / "proc" / "net" / "snmp").write_text(SNMP)
    # node_exporter's netstat collector fails without net/netstat; the agent does not read it.
    (root / "proc" / "net" / "netstat").write_text(
        "TcpExt: SyncookiesSent SyncookiesRecv ListenOverflows ListenDrops\nTcpExt: 0 0 3 4\n"
        "IpExt: InOctets OutOctets\nIpExt: 100 200\n"
    )
    return root


# The kernel's /proc/net/snmp (6.1), large counters past 2^31 as a busy node's are.
SNMP = (
    "Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards "
    "InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails "
    "FragCreates OutTransmits\n"
    "Ip: 1 64 38217 0 0 0 0 0 38217 29000 0 0 0 0 0 0 0 0 0 29000\n"
    "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs "
    "OutSegs RetransSegs InErrs OutRsts InCsumErrors\n"
    "Tcp: 1 200 120000 -1 781 418 299 61 2 5725200812 5491503921 2270 0 465 0\n"
    "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n"
    "Udp: 1006 16 0 1023 0 0 0 0 0\n"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def node_exporter_text(tree: Path) -> Iterator[str]:
    binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    require(binary is not None, "needs prometheus-node-exporter (Debian)")
    assert binary is not None
    port = _free_port()
    proc = subprocess.Popen(
        [binary, f"--web.listen-address=127.0.0.1:{port}", f"--path.procfs={tree / 'proc'}",
         f"--path.sysfs={tree / 'sys'}", "--collector.disable-defaults", "--collector.netdev",
         "--no-collector.netdev.netlink", "--collector.netdev.device-exclude=^$", "--collector.netclass",
         "--collector.infiniband", "--collector.diskstats", "--collector.pressure", "--collector.cpu",
         "--collector.meminfo", "--collector.stat", "--collector.loadavg", "--collector.netstat"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                    yield reply.read().decode()
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def agent_text(tree: Path) -> str:
    from nodeagent.agent.sampling.sampler import Sampler
    from nodeagent.agent.sources import enabled_names

    names = [n for n in enabled_names({}) if n != "gpu"]
    sampler = Sampler(names, node_id="fixture", roots=Roots(procfs=str(tree / "proc"), sysfs=str(tree / "sys")))
    try:
        telemetry = AgentTelemetry("fixture", 1.0)
        telemetry.publish(sampler.tick())
        spool = Spool(max_bytes=1 << 20, max_age_seconds=60)
        metrics = AgentMetrics(telemetry, spool, sender=None, targets=())  # type: ignore[arg-type]
        return AgentExposition(metrics, ["node"]).render().decode()
    finally:
        sampler.close()


def _parse(text: str) -> tuple[dict[str, tuple[str, str]], Series]:
    meta: dict[str, tuple[str, str]] = {}
    series: Series = {}
    for family in text_string_to_metric_families(text):
        meta[family.name] = (family.type, family.documentation)
        for sample in family.samples:
            series[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return meta, series


def test_every_host_family_matches_node_exporter(agent_text: str, node_exporter_text: str) -> None:
    ours_meta, ours = _parse(agent_text)
    theirs_meta, theirs = _parse(node_exporter_text)
    assert len(ours_meta) >= 40, sorted(ours_meta)
    for family, (kind, doc) in ours_meta.items():
        assert family in theirs_meta, f"node_exporter has no family {family}"
        assert theirs_meta[family] == (kind, doc), family
    wrong = {
        key: (value, theirs.get(key))
        for key, value in ours.items()
        if key not in theirs or not math.isclose(value, theirs[key], rel_tol=1e-12, abs_tol=1e-9)
    }
    assert not wrong, wrong
    names = {name for name, _ in ours}
    missing = {key for key in theirs if key[0] in names and key not in ours and not _known_missing(*key)}
    assert not missing, sorted(missing)


def test_reference_values_from_node_exporters_own_expected_output(agent_text: str) -> None:
    """Independent figures from node_exporter's e2e-output.txt (see ../shared/fixtures/README.md)."""
    _, ours = _parse(agent_text)

    def value(name: str, **labels: str) -> float:
        return ours[(name, frozenset(labels.items()))]

    assert value("node_infiniband_port_data_received_bytes_total", device="mlx4_0", port="1") == 18527668
    assert value("node_infiniband_rate_bytes_per_second", device="i40iw0", port="1") == 1.25e9
    assert value("node_disk_read_bytes_total", device="nvme0n1") == 2377714176
    assert value("node_disk_io_time_seconds_total", device="nvme0n1") == pytest.approx(222.766)
    assert value("node_network_speed_bytes", device="eth0") == 1.25e8
    assert value("node_pressure_io_waiting_seconds_total") == pytest.approx(159.886802)
    assert value("node_network_receive_bytes_total", device="eth0") == 874354587
    assert value("node_netstat_Tcp_OutSegs") == 5491503921
    assert value("node_netstat_Tcp_RetransSegs") == 2270
    iwarp = frozenset({("device", "i40iw0"), ("port", "1")})
    assert ("node_infiniband_port_data_received_bytes_total", iwarp) not in ours  # "N/A (no PMA)"
