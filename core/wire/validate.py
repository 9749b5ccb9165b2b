"""Every message from an agent is checked before anything uses it.

Limits are generous for real nodes (an 8-GPU server has 8 GPUs, 18 NVLinks each, a few dozen
NICs) and small enough that one report cannot make the collector allocate or loop much. Numbers
must be finite; doubles must not be negative; ``_ratio`` fields lie in [0, 1]; a uint64 at or
above 2^63 is a negative number sent as unsigned. Strings are bounded and node ids follow
``nodeagent.core.wire.identity``; a job's names (``JobRef.job_key``, ``JobSample.job``, the
Slurm job id, pod UID and container id a GPU's job goes by without a key) are printable too.
A world size or rank is any uint32: a job that claims 10,000 ranks is the job roll-up's to
judge, not a malformed report. The walk visits only the fields a message has set (``ListFields``, one C
call per message) and dispatches on a kind per field computed once per message type, inline:
this runs for every report, and a function call per field would double its cost. Nested messages
are walked without a wrapper call each (41 messages in an 8-GPU report): a list's entry is
counted only on the way out of an error, by walking the list again.

The kinds are those the wire's report and hello have (double, uint64, uint32, bool, string,
messages, repeated messages, strings, uint32s and floats, maps of strings and of uint64): a field of another kind
has no rule here yet, and learning it raises ``TypeError`` (``tests/core/test_validate_repair.py``
walks every field of the .proto, so a new kind fails there first).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from nodeagent.core.wire.identity import NODE_ID_RE
from nodeagent.v1 import nodeagent_pb2 as pb

MAX_STRING = 256
MAX_LONG_STRING = 4096  # event messages, errors, cgroup paths
MAX_REPEATED = 256
NEGATIVE_UINT = 1 << 63
_INF = math.inf
MAX_JOBS = 64  # JobSamples in one report
MAX_RANKS = 4096  # ranks of one job on one node
MAX_JOB_KEY = 256

# Repeated fields whose bound differs from MAX_REPEATED.
REPEATED_LIMITS: dict[str, int] = {
    "NodeReport.gpus": 64,
    "GpuTopology.gpus": 64,
    "GpuSample.nvlinks": 64,
    "GpuSample.processes": 1024,
    # A GPU splits into at most seven MIG instances (eight on some boards to come); one of each.
    "GpuSample.mig_instances": 8,
    "GpuInfo.mig_instances": 8,
    "GpuSample.suspect_fields": 8,
    "HostSample.cpus": 8192,
    "NodeReport.disks": 4096,
    "NodeInfo.disks": 4096,
    "NodeReport.events": 1024,
    "DiskInfo.mountpoints": 64,
    "NodeReport.jobs": MAX_JOBS,
    "JobSample.ranks": MAX_RANKS,
    "JobSample.gpus": 64,
}
# Lists of a message whose entries are that message too, one level down: an entry may not have a
# list of its own (``_flat``).
FLAT_LISTS = {"GpuSample.mig_instances"}
LONG_STRINGS = {"Event.message", "CollectorStatus.error", "JobRef.cgroup", "JobSample.cgroup", "GpuProcess.name"}
# Strings that name a job, or whom it is billed to: at most MAX_JOB_KEY characters, all printable. A
# GPU's job goes by its key, else its Slurm job id, pod UID or container id (``detector/gate.py:
# job_id``), each shown in the ledger's, ``jobs``' and the page's tables: all four are names.
JOB_KEYS = {
    "JobRef.job_key", "JobSample.job", "NodeInfo.routing_key", "Goodbye.routing_key", "JobRef.account",
    "JobRef.k8s_namespace", "JobRef.slurm_job_id", "JobRef.k8s_pod_uid", "JobRef.container_id",
}  # fmt: skip


class InvalidMessageError(ValueError):
    """A message that must be refused; the text names the field and the value."""


def check_report(report: pb.NodeReport, node_id: str) -> None:
    """Raise ``InvalidMessageError`` naming the first bad field of ``report``."""
    check_header(report, node_id)
    check_body(report)


def check_header(report: pb.NodeReport, node_id: str) -> None:
    """The report's node, epoch, seq and time: checked first, before any field below them."""
    if report.node_id != node_id:
        raise InvalidMessageError(f"report for node {report.node_id!r} on the stream of {node_id!r}")
    if report.seq == 0 or report.epoch == 0:
        raise InvalidMessageError("report without epoch or seq")
    if not (report.time_unix_seconds > 0):
        raise InvalidMessageError(f"report time {report.time_unix_seconds!r} is not a positive time")


def check_body(report: pb.NodeReport) -> None:
    """Every field's rule (the walk): ``check_report`` less ``check_header``."""
    _check(report, "report")


def repair(message: Message, limit: int = 64) -> list[str]:
    """Clear what the collector would refuse, in place; returns what was dropped (one line each).

    The agent runs this on its own reports before spooling them: a report the collector refuses
    would otherwise be resent forever and block every report behind it. A bad value (a GPU
    counter gone NaN, a ratio a hair above 1) loses that value only, a bad map entry its map; a
    list that is too long is cut to its bound, a string to its length limit."""
    dropped: list[str] = []
    for _ in range(limit):
        try:
            _walk(message)
            return dropped
        except _BadValueError as bad:
            dropped.append(f"{bad.where}: {bad.problem}")
            _drop(message, bad.where)
    return dropped


def _drop(message: Message, where: str) -> None:
    parts = _SEGMENT.findall(where)
    parent: Any = message
    for name, index in parts[:-1]:
        parent = getattr(parent, name)
        if index:
            parent = parent[int(index)]
    name, _index = parts[-1]
    field = parent.DESCRIPTOR.fields_by_name[name]
    value = getattr(parent, name)
    kind, bound = _KINDS.get(field) or _learn(field, value)
    if kind in (_REPEATED_MESSAGE, _FLAT, _REPEATED_STRING, _REPEATED_UINT, _REPEATED_FLOAT) and len(value) > bound:
        del value[bound:]
    elif kind in (_STRING, _KEY) and len(value) > bound:
        setattr(parent, name, value[:bound])
    else:
        parent.ClearField(name)


# A path segment: a field, with the index of a repeated message's entry (a map is reported whole).
_SEGMENT = re.compile(r"(\w+)(?:\[(\d+)\])?")


def check_hello(info: pb.NodeInfo) -> None:
    if not NODE_ID_RE.fullmatch(info.node_id):
        raise InvalidMessageError(f"invalid node id {info.node_id[:64]!r}")
    _check(info, "hello")


def check_goodbye(goodbye: pb.Goodbye) -> None:
    """Its routing key is a job key (printable, bounded), its reason a short string."""
    _check(goodbye, "goodbye")


# ---- the walk ----
# Paths are built only on the way out of an error, so a good report costs no string formatting.

(_DOUBLE, _RATIO, _UINT, _STRING, _KEY, _MESSAGE, _OTHER,
 _REPEATED_MESSAGE, _REPEATED_STRING, _REPEATED_UINT, _MAP_UINT, _MAP_STRING, _REPEATED_FLOAT,
 _FLAT) = range(14)  # fmt: skip


class _BadValueError(Exception):
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(where, problem)
        self.where = where
        self.problem = problem


# FieldDescriptor -> (kind, limit): limit is the string length or the repeated count allowed.
_KINDS: dict[Any, tuple[int, int]] = {}


def _check(message: Message, path: str) -> None:
    try:
        _walk(message)
    except _BadValueError as bad:
        raise InvalidMessageError(f"{path}.{bad.where}: {bad.problem}") from None


def _walk(message: Message) -> None:
    kinds = _KINDS
    for field, value in message.ListFields():
        try:
            kind, limit = kinds[field]
        except KeyError:
            kind, limit = _learn(field, value)
        # The kinds by how often an 8-GPU report has them (uint64s first): fewer tests per field.
        if kind == _UINT:
            if value >= NEGATIVE_UINT:
                raise _BadValueError(field.name, f"{value} is a negative count sent as unsigned")
        elif kind == _DOUBLE:
            if not (value >= 0.0 and value != _INF):  # false for NaN too
                raise _BadValueError(field.name, f"{value!r} is not a finite, non-negative number")
        elif kind == _OTHER:
            continue
        elif kind == _STRING:
            if len(value) > limit:
                raise _BadValueError(field.name, f"{len(value)} characters, at most {limit}")
        elif kind == _MESSAGE:
            try:
                _walk(value)
            except _BadValueError as bad:
                raise _BadValueError(f"{field.name}.{bad.where}", bad.problem) from None
        elif kind == _RATIO:
            if not (0.0 <= value <= 1.0):
                raise _BadValueError(field.name, f"{value!r} is not a ratio in [0, 1]")
        elif kind == _KEY:
            if len(value) > limit:
                raise _BadValueError(field.name, f"{len(value)} characters, at most {limit}")
            if not value.isprintable():
                raise _BadValueError(field.name, f"{value[:64]!r} has characters that are not printable")
        elif len(value) > limit:
            raise _BadValueError(field.name, f"{len(value)} entries, at most {limit}")
        elif kind == _REPEATED_MESSAGE:
            try:
                for item in value:
                    _walk(item)
            except _BadValueError:
                _name_the_entry(field.name, value)
        elif kind == _REPEATED_UINT:
            continue  # every uint32 is valid; only the count is bounded
        elif kind == _REPEATED_FLOAT:
            for number in value:
                if not (number >= 0.0 and number != _INF):  # false for NaN too
                    raise _BadValueError(field.name, f"{number!r} is not a finite, non-negative number")
        elif kind == _FLAT:
            try:
                for item in value:
                    _walk(item)
            except _BadValueError:
                _name_the_entry(field.name, value)
            _flat(field.name, value)
        elif kind == _REPEATED_STRING:
            if max(map(len, value)) > MAX_STRING:
                raise _BadValueError(field.name, f"an entry longer than {MAX_STRING} characters")
        else:  # maps
            if max(map(len, value)) > MAX_STRING:
                raise _BadValueError(field.name, f"a key longer than {MAX_STRING} characters")
            if kind == _MAP_UINT:
                if max(value.values()) >= NEGATIVE_UINT:
                    raise _BadValueError(field.name, "a negative count sent as unsigned")
            elif max(map(len, value.values())) > MAX_LONG_STRING:
                raise _BadValueError(field.name, f"a value longer than {MAX_LONG_STRING} characters")


def _flat(name: str, items: Any) -> None:
    """A MIG instance is a GpuSample too, one level down: one with instances of its own would let
    a report multiply its GPU samples (64 x 8 x 8). Checked where the walk meets the list, after
    its entries: a report without MIG instances (most) costs nothing here."""
    for index, item in enumerate(items):
        if getattr(item, name):
            raise _BadValueError(f"{name}[{index}].{name}", "a MIG instance has no instances")


def _name_the_entry(name: str, items: Any) -> None:
    """On the way out of an error in a list: walk it again, counting, to name the entry."""
    for index, item in enumerate(items):
        try:
            _walk(item)
        except _BadValueError as bad:
            raise _BadValueError(f"{name}[{index}].{bad.where}", bad.problem) from None


def _learn(field: FieldDescriptor, value: object) -> tuple[int, int]:
    # A map field is a repeated message field whose value is a Mapping, in every protobuf runtime.
    # Asking the descriptor instead (``message_type.GetOptions().map_entry``) imports descriptor_pb2:
    # 0.8 MB resident in the agent. Only containers meet the isinstance (each type it meets stays in
    # the ABC's cache).
    is_map = field.message_type is not None and field.is_repeated and isinstance(value, Mapping)
    kind_limit = _kind(field, is_map=is_map)
    _KINDS[field] = kind_limit
    return kind_limit


def _kind(field: FieldDescriptor, *, is_map: bool) -> tuple[int, int]:
    owner = field.containing_type
    qualified = f"{owner.name if owner is not None else ''}.{field.name}"
    count = REPEATED_LIMITS.get(qualified, MAX_REPEATED)
    message_type = field.message_type
    if is_map and message_type is not None:
        value_type = message_type.fields_by_name["value"].type
        if value_type == FieldDescriptor.TYPE_UINT64:
            return _MAP_UINT, count
        if value_type == FieldDescriptor.TYPE_STRING:
            return _MAP_STRING, count
    elif field.is_repeated:
        if message_type is not None:
            return (_FLAT if qualified in FLAT_LISTS else _REPEATED_MESSAGE), count
        if field.type == FieldDescriptor.TYPE_STRING:
            return _REPEATED_STRING, count
        if field.type == FieldDescriptor.TYPE_UINT32:
            return _REPEATED_UINT, count
        if field.type == FieldDescriptor.TYPE_FLOAT:
            return _REPEATED_FLOAT, count
    elif message_type is not None:
        return _MESSAGE, 0
    elif field.type == FieldDescriptor.TYPE_DOUBLE:
        return (_RATIO if field.name.endswith("_ratio") else _DOUBLE), 0
    elif field.type == FieldDescriptor.TYPE_UINT64:
        return _UINT, 0
    elif field.type == FieldDescriptor.TYPE_STRING:
        if qualified in JOB_KEYS:
            return _KEY, MAX_JOB_KEY
        return _STRING, (MAX_LONG_STRING if qualified in LONG_STRINGS else MAX_STRING)
    elif field.type in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_BOOL):
        return _OTHER, 0  # every value is valid
    elif field.type == FieldDescriptor.TYPE_ENUM:
        return _OTHER, 0  # an open enum: a value this side does not know reads as the unspecified one
    raise TypeError(f"{qualified}: a kind of field validate.py has no rule for; give it one")
