"""The proof from a report's bytes (``core/wire/proof.py``) never passes a report the walk refuses.

Every rule is broken in every message it applies to, at every path a report has that message
(lists with three entries, the middle one broken, so that the proof's merged instances are
exercised): the walk refuses each, and the proof does not prove it. Values at each rule's edge
that the walk passes are offered too: the proof may fail to prove them, but ``check_report`` with
the bytes passes them. The recorded traces and loadgen's reports are proven, and a few thousand
reports with random values from the edges give the same answer both ways.
"""

from __future__ import annotations

import gzip
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from nodeagent.core.wire import proof, validate
from nodeagent.core.wire.validate import InvalidMessageError
from nodeagent.tools.loadgen import _report_pool
from nodeagent.v1 import nodeagent_pb2 as pb

DATA = Path(__file__).parents[1] / "data"
Path_ = tuple[FieldDescriptor, ...]


def _walk_passes(report: pb.NodeReport) -> bool:
    """The walk's answer (``check_body``: the header's rules are checked before either)."""
    try:
        validate.check_body(report)
    except InvalidMessageError:
        return False
    return True


def _proves(report: pb.NodeReport) -> bool:
    return proof.proves_valid(report, report.SerializeToString())


def _base() -> pb.NodeReport:
    return pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=5.0)


def _paths(message: Descriptor, path: Path_ = (), depth: int = 0) -> Iterator[tuple[Path_, Descriptor]]:
    """Each path from the report to a message (map entries are reached through their map; a MIG
    instance's own instances once, to break the flat rule)."""
    yield path, message
    if depth > 4:
        return
    for field in message.fields:
        child = field.message_type
        if child is None or child.GetOptions().map_entry:
            continue
        flat = f"{message.name}.{field.name}" in validate.FLAT_LISTS
        if flat and any(f.name == field.name for f in path):
            continue
        yield from _paths(child, (*path, field), depth + 1)


def _at(report: pb.NodeReport, path: Path_) -> list[Any]:
    """The messages at ``path`` in ``report``, made: three entries for each list on the way."""
    level: list[Any] = [report]
    for field in path:
        below = []
        for parent in level:
            if field.is_repeated:
                container = getattr(parent, field.name)
                below.extend(container.add() for _ in range(3))
            else:
                below.append(getattr(parent, field.name))
        level = below
    for message in level:  # present, even where the break sets nothing
        message.SetInParent()
    return level


def _breaks(field: FieldDescriptor) -> Iterator[tuple[str, Any, bool]]:
    """(what, a function setting it on a message, whether the walk passes it)."""
    kind, limit = validate._kind(field, is_map=_is_map(field))
    name = field.name
    scalar = _scalar_breaks(kind, limit)
    if scalar is not None:
        for value, valid in scalar:
            yield f"{name}={value!r:.20}", lambda m, v=value: setattr(m, name, v), valid
    elif kind in (validate._REPEATED_MESSAGE, validate._FLAT):
        for count, valid in ((limit, True), (limit + 1, False)):
            yield f"{name}x{count}", lambda m, n=count: [getattr(m, name).add() for _ in range(n)], valid
    elif kind == validate._REPEATED_STRING:
        yield f"{name} long", lambda m: getattr(m, name).append("x" * 257), False
        yield f"{name} edge", lambda m: getattr(m, name).append("é" * 256), True
        for count, valid in ((limit, True), (limit + 1, False)):
            yield f"{name}x{count}", lambda m, n=count: getattr(m, name).extend(["a"] * n), valid
    elif kind in (validate._REPEATED_UINT, validate._REPEATED_FLOAT):
        for count, valid in ((limit, True), (limit + 1, False)):
            yield f"{name}x{count}", lambda m, n=count: getattr(m, name).extend([1] * n), valid
        if kind == validate._REPEATED_FLOAT:
            for value, valid in ((-1.0, False), (math.nan, False), (math.inf, False), (3e38, True), (0.0, True)):
                yield f"{name}={value}", lambda m, v=value: getattr(m, name).extend([1.0, v]), valid
    elif kind in (validate._MAP_UINT, validate._MAP_STRING):
        yield from _map_breaks(name, kind, limit)


def _scalar_breaks(kind: int, limit: int) -> list[tuple[Any, bool]] | None:
    if kind == validate._DOUBLE:
        return [(-1.0, False), (math.nan, False), (math.inf, False), (-math.inf, False), (-5e-324, False),
                (-0.0, True), (1e308, True), (5e-324, True)]  # fmt: skip
    if kind == validate._RATIO:
        return [(1.0000000000000002, False), (2.0, False), (-1e-9, False), (math.nan, False), (math.inf, False),
                (1.0, True), (-0.0, True), (0.9999999999999999, True), (5e-324, True)]  # fmt: skip
    if kind == validate._UINT:
        return [(2**63, False), (2**64 - 1, False), (2**63 - 1, True)]
    if kind == validate._STRING:
        return [("x" * (limit + 1), False), ("é" * limit, True), ("é" * (limit + 1), False)]
    if kind == validate._KEY:
        return [("x" * (limit + 1), False), ("a\x01", False), ("a\u200b", False), ("a\n", False),
                ("é" * limit, True), ('a "quoted" \\ key', True)]  # fmt: skip
    return None


def _map_breaks(name: str, kind: int, limit: int) -> Iterator[tuple[str, Any, bool]]:
    value: Any = 1 if kind == validate._MAP_UINT else "v"
    yield f"{name} key", lambda m: getattr(m, name).__setitem__("k" * 257, value), False
    yield f"{name} entries", lambda m: getattr(m, name).update({str(i): value for i in range(limit + 1)}), False
    yield f"{name} full", lambda m: getattr(m, name).update({str(i): value for i in range(limit)}), True
    if kind == validate._MAP_UINT:
        yield f"{name} value", lambda m: getattr(m, name).__setitem__("k", 2**63), False
    else:
        yield f"{name} value", lambda m: getattr(m, name).__setitem__("k", "v" * 4097), False
        yield f"{name} long value", lambda m: getattr(m, name).__setitem__("k", "é" * 4096), True


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _cases() -> Iterator[tuple[str, pb.NodeReport, bool]]:
    for path, message in _paths(pb.NodeReport.DESCRIPTOR):
        where = ".".join(f.name for f in path) or "report"
        for field in message.fields:
            own_list = bool(path) and path[-1] == field  # a MIG instance's instances: none allowed
            for what, apply, passes in _breaks(field):
                report = _base()
                instances = _at(report, path)
                apply(instances[len(instances) // 2])
                yield f"{where}.{what}", report, passes and not own_list


def test_the_proof_never_passes_a_report_the_walk_refuses() -> None:
    refused = proved = 0
    for what, report, valid in _cases():
        assert _walk_passes(report) == valid, what
        if not valid:
            refused += 1
            assert not _proves(report), what
        proved += _proves(report)
    assert refused > 900  # every rule, in every message at every path
    assert proved > 100  # and the edges the walk passes are mostly proven too


def test_the_flat_rule_and_per_instance_bounds() -> None:
    report = _base()
    gpu = report.gpus.add(index=0)
    gpu.mig_instances.add(index=0).mig_instances.add(index=1)
    assert not _walk_passes(report) and not _proves(report)
    # 8 GPUs of 18 NVLinks: the sum (144) is over a GPU's bound (64), each GPU is within it.
    report = _base()
    for index in range(8):
        report.gpus.add(index=index).nvlinks.extend(pb.NvLinkSample(link=link) for link in range(18))
    assert _walk_passes(report) and _proves(report)
    report.gpus[5].nvlinks.extend(pb.NvLinkSample(link=link) for link in range(18, 65))
    assert not _walk_passes(report) and not _proves(report)
    # Empty entries count too (they merge into nothing).
    report = _base()
    report.gpus.add(index=0).processes.extend(pb.GpuProcess() for _ in range(1025))
    assert not _walk_passes(report) and not _proves(report)


def _recorded() -> Iterator[pb.NodeReport]:
    for path in sorted((DATA / "lab").glob("*.jsonl")) + sorted((DATA / "lab_cluster").glob("*.jsonl.gz")):
        opener: Any = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as lines:
            for number, line in enumerate(lines):
                if number % 7 == 0 and line.strip():
                    yield json_format.Parse(line, pb.NodeReport(), ignore_unknown_fields=True)


def test_recorded_traces_and_loadgen_reports_are_proven() -> None:
    reports = list(_recorded())
    for scenario in ("healthy", "storage-bound", "interconnect-bound", "xid-errors"):
        reports.extend(pb.NodeReport.FromString(raw) for raw in _report_pool(scenario)[1][:20])
    assert len(reports) > 100
    for report in reports:
        assert _walk_passes(report)
        assert _proves(report)


def _mutated(rng: random.Random, report: pb.NodeReport) -> pb.NodeReport:
    """``report`` with a few of its numbers and strings set to values at the rules' edges."""
    copy = pb.NodeReport()
    copy.CopyFrom(report)
    messages = [
        copy.host,
        *copy.gpus,
        *copy.host.cpus,
        *copy.disks,
        *copy.nics,
        *(p for g in copy.gpus for p in g.processes),
    ]
    edges = [-0.0, -1e-300, 1.0, 1.0000001, math.nan, math.inf, 0.5, 1e300, 2**63, 2**63 - 1, 7]
    for _ in range(3):
        message = rng.choice(messages)
        field = rng.choice(message.DESCRIPTOR.fields)
        if field.is_repeated or field.message_type is not None:
            continue
        value = rng.choice(edges)
        if field.type == FieldDescriptor.TYPE_STRING:
            setattr(message, field.name, rng.choice(["x" * 257, "a\x01", "é" * 256, "ok"]))
        elif field.type == FieldDescriptor.TYPE_DOUBLE:
            setattr(message, field.name, float(value))
        elif field.type == FieldDescriptor.TYPE_UINT64 and isinstance(value, int):
            setattr(message, field.name, int(value))
    return copy


@pytest.mark.parametrize("seed", [1, 2])
def test_random_edges_give_the_same_answer(seed: int) -> None:
    rng = random.Random(seed)
    pool = [pb.NodeReport.FromString(raw) for raw in _report_pool("healthy")[1][:10]]
    for report in pool:
        report.node_id = "n"
    disagreements = []
    for _ in range(600):
        report = _mutated(rng, rng.choice(pool))
        if _proves(report) and not _walk_passes(report):
            disagreements.append(str(report)[:200])
    assert disagreements == []


def test_check_report_with_the_bytes_refuses_as_the_walk_does() -> None:
    for what, report, _valid in list(_cases())[::5]:
        try:
            validate.check_report(report, "n")
            walked = None
        except InvalidMessageError as err:
            walked = str(err)
        try:
            proof.check_report(report, "n", report.SerializeToString())
            proven = None
        except InvalidMessageError as err:
            proven = str(err)
        assert proven == walked, what


def test_bytes_that_are_not_the_report_s_prove_nothing() -> None:
    report = _base()
    assert not proof.proves_valid(report, b"\x0a\xff")  # a length past the end
    proof.check_report(report, "n", b"\x0a\xff")  # walked instead
