"""The agent cleans its own reports with the collector's rules, so none is refused forever."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from nodeagent.core.wire import validate
from nodeagent.core.wire.validate import LONG_STRINGS, REPEATED_LIMITS, check_report, repair
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


def _fields(message: Descriptor, seen: set[str] | None = None) -> Iterator[FieldDescriptor]:
    """Every field of a message and of the messages under it (map entries stay inside their map)."""
    seen = set() if seen is None else seen
    if message.full_name in seen:
        return
    seen.add(message.full_name)
    for field in message.fields:
        yield field
        if field.message_type is not None and not field.message_type.GetOptions().map_entry:
            yield from _fields(field.message_type, seen)


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def test_every_field_an_agent_sends_has_a_rule() -> None:
    # A field of a kind the validator has no rule for (a repeated double, an int32, bytes) fails
    # here, not in a collector that meets it: give it its rule in validate.py first.
    fields = [*_fields(pb.NodeReport.DESCRIPTOR), *_fields(pb.NodeInfo.DESCRIPTOR)]
    for field in fields:
        validate._kind(field, is_map=_is_map(field))
    # The bounds name fields that exist and are of their kind.
    by_name = {f"{f.containing_type.name}.{f.name}": f for f in fields}
    assert all(by_name[name].is_repeated for name in REPEATED_LIMITS)
    assert all(by_name[name].type == FieldDescriptor.TYPE_STRING for name in LONG_STRINGS)


def test_a_kind_without_a_rule_is_refused_loudly() -> None:
    gpu = pb.HistoryRequest.DESCRIPTOR.fields_by_name["gpu"]  # int32: no report field has one
    with pytest.raises(TypeError, match=r"HistoryRequest\.gpu"):
        validate._kind(gpu, is_map=False)


# ---- multi-node jobs ----


def _job_report(jobs: int = 1, ranks: int = 8, key: str = "torch/run-1", world_size: int = 16) -> pb.NodeReport:
    report = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=5.0)
    report.gpus.add(index=0).processes.add(pid=7, job=pb.JobRef(job_key=key, world_size=world_size, rank=3))
    for index in range(jobs):
        report.jobs.add(job=key if index == 0 else f"torch/run-{index}", source="torch", world_size=world_size,
                        ranks=range(ranks), gpus=[0])  # fmt: skip
    return report


def test_a_job_claiming_a_huge_world_is_the_roll_up_s_to_judge_not_a_refusal() -> None:
    check_report(_job_report(world_size=10_000), "n")
    check_report(_job_report(world_size=2**31 - 1), "n")
    check_report(_job_report(jobs=64, ranks=4096, key="k" * 250), "n")


@pytest.mark.parametrize(
    ("report", "reason"),
    [
        pytest.param(_job_report(jobs=65), "report.jobs: 65 entries, at most 64", id="too-many-jobs"),
        pytest.param(_job_report(ranks=4097), "report.jobs[0].ranks: 4097 entries, at most 4096", id="too-many-ranks"),
        pytest.param(
            _job_report(key="k" * 257), "report.gpus[0].processes[0].job.job_key: 257 characters, at most 256",
            id="key-too-long",
        ),
        pytest.param(
            _job_report(key="torch/\x1b[2Jrun"),
            "report.gpus[0].processes[0].job.job_key: 'torch/\\x1b[2Jrun' has characters that are not printable",
            id="key-not-printable",
        ),
    ],
)  # fmt: skip
def test_job_bounds_are_refused_with_one_line(report: pb.NodeReport, reason: str) -> None:
    with pytest.raises(validate.InvalidMessageError) as refused:
        check_report(report, "n")
    assert str(refused.value) == reason


def test_repair_cuts_jobs_to_their_bounds_and_clears_an_unprintable_key() -> None:
    report = _job_report(jobs=70, key="torch/\nrun")
    report.jobs[0].ranks.extend(range(8, 5000))
    dropped = repair(report)
    check_report(report, "n")
    assert len(report.jobs) == 64 and len(report.jobs[0].ranks) == 4096
    assert report.gpus[0].processes[0].job.job_key == "" and report.jobs[0].job == ""
    assert report.gpus[0].processes[0].job.world_size == 16  # the rest of the job is kept
    assert len(dropped) == 4


@pytest.mark.parametrize("field", ["account", "k8s_namespace", "slurm_job_id", "k8s_pod_uid", "container_id"])
def test_an_account_namespace_or_a_job_s_other_names_are_printable_and_bounded_like_a_job_key(field: str) -> None:
    """A GPU's job goes by its Slurm job id, pod UID or container id without a key (``job_id``):
    the tables show them, so they are names, checked as the key is."""
    report = _job_report()
    setattr(report.gpus[0].processes[0].job, field, "team\x1b[2J")
    with pytest.raises(validate.InvalidMessageError, match=f"job.{field}: .* not printable"):
        check_report(report, "n")
    assert repair(report) and getattr(report.gpus[0].processes[0].job, field) == ""
    setattr(report.gpus[0].processes[0].job, field, "ml-" * 90)
    assert repair(report) and len(getattr(report.gpus[0].processes[0].job, field)) == 256
    check_report(report, "n")


def test_power_readings_between_reports_are_finite_non_negative_and_bounded() -> None:
    good = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=5.0)
    good.gpus.add(index=0).power_samples_watts.extend([380.0, 120.0])
    assert repair(good) == []
    bad = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=5.0)
    bad.gpus.add(index=0).power_samples_watts.extend([380.0, float("nan")])
    assert repair(bad) == ["gpus[0].power_samples_watts: nan is not a finite, non-negative number"]
    assert not bad.gpus[0].power_samples_watts
    many = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=5.0)
    many.gpus.add(index=0).power_samples_watts.extend([100.0] * 300)
    assert repair(many) == ["gpus[0].power_samples_watts: 300 entries, at most 256"]
    assert len(many.gpus[0].power_samples_watts) == 256
