"""The agent cleans its own reports with the collector's rules, so none is refused forever."""

from __future__ import annotations

import math

from nodeagent.core.wire.validate import check_report, repair
from nodeagent.v1 import nodeagent_pb2 as pb


def _report() -> pb.NodeReport:
    report = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=5.0)
    gpu = report.gpus.add(index=0, utilization_gpu_ratio=0.5, power_watts=math.nan, sm_active_ratio=1.0000001)
    gpu.processes.add(pid=7, name="python")
    port = report.rdma_ports.add(device="mlx5_0", port=1)
    port.counters["port_rcv_errors"] = 3
    port.counters["symbol_error"] = 2**64 - 1
    report.events.add(kind="collector_error", message="m" * 5000)
    for index in range(70):
        report.gpus.add(index=index + 1)
    return report


def test_repair_drops_only_what_the_collector_would_refuse() -> None:
    report = _report()
    dropped = repair(report)
    check_report(report, "n")  # now acceptable
    gpu = report.gpus[0]
    assert not gpu.HasField("power_watts")
    assert not gpu.HasField("sm_active_ratio")
    assert (gpu.utilization_gpu_ratio, gpu.processes[0].name) == (0.5, "python")  # the rest is kept
    assert len(report.gpus) == 64
    assert len(report.events[0].message) == 4096
    assert len(dropped) == 5
    assert any("power_watts: nan" in line for line in dropped)


def test_a_clean_report_is_left_alone() -> None:
    report = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=5.0)
    report.gpus.add(index=0, utilization_gpu_ratio=1.0, power_watts=700.0)
    before = report.SerializeToString()
    assert repair(report) == []
    assert report.SerializeToString() == before


def test_maps_are_checked_by_the_kind_of_their_values() -> None:
    # Counter maps refuse a negative count sent as unsigned, string maps a value past the long
    # string bound; both refuse a long key, and a value that would be wrong in a list is fine here.
    counters = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=5.0)
    counters.rdma_ports.add(device="mlx5_0", port=1).counters["symbol_error"] = 2**63
    attributes = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=5.0)
    attributes.events.add(kind="k").attributes["detail"] = "v" * 4097
    keys = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=5.0)
    keys.events.add(kind="k").attributes["k" * 257] = "v"
    fine = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=5.0)
    fine.events.add(kind="k").attributes["detail"] = "v" * 4096
    fine.rdma_ports.add(device="mlx5_0", port=1).counters["symbol_error"] = 2**63 - 1
    assert repair(counters) == ["rdma_ports[0].counters: a negative count sent as unsigned"]
    assert repair(attributes) == ["events[0].attributes: a value longer than 4096 characters"]
    assert repair(keys) == ["events[0].attributes: a key longer than 256 characters"]
    assert repair(fine) == []
    assert not counters.rdma_ports[0].counters and not attributes.events[0].attributes
