"""The committed generated code is exactly what protoc makes of the committed .proto."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.trees import REPO

# nodeagent's own contract, the kubelet's pod-resources API and Prometheus' remote-write messages.
PACKAGES = ("nodeagent/v1", "nodeagent/podresources/v1", "nodeagent/prompb")


@pytest.mark.parametrize("package", PACKAGES)
def test_generated_code_matches_the_proto(tmp_path: Path, package: str) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "proto" / "generate.py"), "--out", str(tmp_path)], check=True, timeout=60
    )
    fresh = {p.name: p.read_bytes() for p in (tmp_path / package).glob("*_pb2*")}
    committed = {p.name: p.read_bytes() for p in (REPO / "proto" / package).glob("*_pb2*")}
    assert fresh, f"protoc made nothing of {package}"
    assert sorted(fresh) == sorted(committed), package
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"regenerate with `make proto`: {package}/{stale} differ from their .proto"


def test_report_round_trips_through_the_wire() -> None:
    from nodeagent.v1 import nodeagent_pb2 as pb

    report = pb.NodeReport(node_id="n1", epoch=3, seq=7)
    report.nics.add(name="eth0", rx_bytes_total=2**64 - 1)
    report.rdma_ports.add(device="mlx5_0", port=1).counters["symbol_error"] = 3
    again = pb.NodeReport.FromString(report.SerializeToString())
    assert again == report
    assert again.nics[0].rx_bytes_total == 2**64 - 1
