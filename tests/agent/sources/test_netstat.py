"""The netstat source: TCP segments sent and retransmitted from a fake ``/proc/net/snmp``, read
by column name, and what it does with a file that is missing or malformed."""

from __future__ import annotations

from pathlib import Path

from nodeagent.agent.sources import Roots
from nodeagent.agent.sources.netstat import parse_snmp
from tests.fakes.trees import rewrite, write_tree

# A 6.1 kernel's file (Ip and Udp lines shortened).
SNMP = (
    "Ip: Forwarding DefaultTTL InReceives\n"
    "Ip: 1 64 38217\n"
    "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs "
    "OutSegs RetransSegs InErrs OutRsts InCsumErrors\n"
    "Tcp: 1 200 120000 -1 781 418 299 61 2 38087 28860 15 0 465 0\n"
    "Udp: InDatagrams NoPorts InErrors OutDatagrams\n"
    "Udp: 1006 16 0 1023\n"
)


def test_the_tcp_counters_come_from_their_columns(tmp_path: Path, make_sampler) -> None:
    root = write_tree(tmp_path, {"proc/net/snmp": SNMP})
    sampler = make_sampler(Roots(str(root / "proc"), str(root / "sys")), sources=["netstat"])
    host = sampler.tick().host
    assert (host.tcp_out_segments_total, host.tcp_retransmitted_segments_total) == (28860, 15)
    # The kernel rewrites the file; a later tick reads the new counts (a descriptor kept open).
    rewrite(root / "proc/net/snmp", SNMP.replace(" 28860 15 ", " 30000 42 "))
    host = sampler.tick().host
    assert (host.tcp_out_segments_total, host.tcp_retransmitted_segments_total) == (30000, 42)


def test_columns_are_found_by_name_not_place() -> None:
    # A kernel with another column order (and a column more) still gives the right counts.
    text = "Tcp: RetransSegs Extra OutSegs\nTcp: 7 99 1234\n"
    assert parse_snmp(text)["Tcp"] == {"RetransSegs": 7, "Extra": 99, "OutSegs": 1234}


def test_a_missing_or_malformed_file_loses_only_these_counters(tmp_path: Path, make_sampler) -> None:
    root = write_tree(tmp_path, {"proc/meminfo": "MemTotal: 1 kB\n"})
    sampler = make_sampler(Roots(str(root / "proc"), str(root / "sys")), sources=["netstat", "meminfo"])
    report = sampler.tick()
    assert all(c.success for c in report.collectors)
    assert not report.host.HasField("tcp_out_segments_total")
    assert report.host.memory_total_bytes == 1024
    # Header and values of different lengths, a value that is not a number, a lone line.
    for text in (
        "Tcp: OutSegs RetransSegs\nTcp: 5\n",
        "Tcp: OutSegs RetransSegs\nTcp: x 3\n",
        "Tcp: OutSegs RetransSegs\n",
    ):
        write_tree(root, {"proc/net/snmp": text})
        host = sampler.tick().host
        assert not host.HasField("tcp_out_segments_total"), text
    assert parse_snmp("Tcp: OutSegs RetransSegs\nTcp: x 3\n")["Tcp"] == {"RetransSegs": 3}
