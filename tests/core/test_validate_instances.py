"""MIG instances, fabric and the new GPU fields on the wire: bounded like the rest of a report."""

from __future__ import annotations

import pytest

from nodeagent.core.wire.validate import InvalidMessageError, check_report, repair
from nodeagent.v1 import nodeagent_pb2 as pb


def _report() -> pb.NodeReport:
    report = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=5.0)
    gpu = report.gpus.add(index=0, uuid="GPU-a")
    gpu.fabric.state = "completed"
    gpu.fabric.clique_id = 7
    gpu.xid_errors_total["79"] = 2
    gpu.suspect_fields.append("sm_active_ratio")
    for gi in (1, 2, 3):
        gpu.mig_instances.add(index=0, uuid=f"MIG-{gi}", gpu_instance_id=gi, memory_used_bytes=1 << 30)
    return report


def test_a_mig_split_gpu_with_fabric_and_xid_counts_is_accepted() -> None:
    report = _report()
    check_report(report, "n")
    assert repair(report) == []


def test_an_instance_with_instances_is_refused_and_repaired() -> None:
    report = _report()
    report.gpus[0].mig_instances[1].mig_instances.add(index=0)
    with pytest.raises(InvalidMessageError, match=r"gpus\[0\]\.mig_instances\[1\]\.mig_instances"):
        check_report(report, "n")
    assert repair(report) == ["gpus[0].mig_instances[1].mig_instances: a MIG instance has no instances"]
    check_report(report, "n")
    assert len(report.gpus[0].mig_instances) == 3


def test_more_instances_than_a_gpu_can_hold_are_cut() -> None:
    report = _report()
    for gi in range(4, 12):
        report.gpus[0].mig_instances.add(index=0, gpu_instance_id=gi)
    with pytest.raises(InvalidMessageError, match="11 entries, at most 8"):
        check_report(report, "n")
    repair(report)
    assert len(report.gpus[0].mig_instances) == 8
    report.gpus[0].mig_instances[0].memory_used_bytes = 1 << 63
    assert repair(report) == [
        "gpus[0].mig_instances[0].memory_used_bytes: 9223372036854775808 is a negative count sent as unsigned"
    ]
