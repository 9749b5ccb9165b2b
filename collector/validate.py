"""Every message from an agent is checked before anything uses it.

Limits are generous for real nodes (an 8-GPU server has 8 GPUs, 18 NVLinks each, a few dozen
NICs) and small enough that one report cannot make the collector allocate or loop much. Numbers
must be finite; doubles must not be negative; ``_ratio`` fields lie in [0, 1]; a uint64 at or
above 2^63 is a negative number sent as unsigned. Strings are bounded and node ids follow
``agent.identity``. The checks walk only the fields a message has set (``ListFields``), with a
plan per message type computed once, so a typical 8-GPU report costs tens of microseconds.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from nodeagent.v1 import nodeagent_pb2 as pb

from agent.identity import NODE_ID_RE

MAX_STRING = 256
MAX_LONG_STRING = 4096  # event messages, errors, cgroup paths
MAX_REPEATED = 256
NEGATIVE_UINT = 1 << 63

# Repeated fields whose bound differs from MAX_REPEATED.
REPEATED_LIMITS: dict[str, int] = {
    "NodeReport.gpus": 64,
    "NodeInfo.gpu": 1,
    "GpuTopology.gpus": 64,
    "GpuSample.nvlinks": 64,
    "GpuSample.processes": 1024,
    "HostSample.cpus": 8192,
    "NodeReport.disks": 4096,
    "NodeInfo.disks": 4096,
    "NodeReport.events": 1024,
    "DiskInfo.mountpoints": 64,
}
LONG_STRINGS = {"Event.message", "CollectorStatus.error", "JobRef.cgroup", "GpuProcess.name"}


class InvalidMessageError(ValueError):
    """A message that must be refused; the text names the field and the value."""


def check_report(report: pb.NodeReport, node_id: str) -> None:
    """Raise ``InvalidMessageError`` naming the first bad field of ``report``."""
    if report.node_id != node_id:
        raise InvalidMessageError(f"report for node {report.node_id!r} on the stream of {node_id!r}")
    if report.seq == 0 or report.epoch == 0:
        raise InvalidMessageError("report without epoch or seq")
    if not (report.time_unix_seconds > 0):
        raise InvalidMessageError(f"report time {report.time_unix_seconds!r} is not a positive time")
    _check(report, "report")


def check_hello(info: pb.NodeInfo) -> None:
    if not NODE_ID_RE.fullmatch(info.node_id):
        raise InvalidMessageError(f"invalid node id {info.node_id[:64]!r}")
    _check(info, "hello")


# ---- the walk ----
# Checkers return None when the value is fine, else what is wrong with it. Paths are built only
# on the way out of an error, so a good report costs no string formatting.

_Checker = Callable[[Any], str | None]
_SCALAR, _MESSAGE, _REPEATED_SCALAR, _REPEATED_MESSAGE, _MAP = range(5)


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: int
    check: _Checker
    limit: int


class _BadValueError(Exception):
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(where, problem)
        self.where = where
        self.problem = problem


_PLANS: dict[Any, dict[Any, _Field]] = {}


def _check(message: Message, path: str) -> None:
    # The fast pass checks whole groups of fields with one C-level call each; only a message it
    # doubts gets the field-by-field walk, which names the culprit (or clears a false alarm).
    if _fast_ok(message):
        return
    try:
        _walk(message)
    except _BadValueError as bad:
        raise InvalidMessageError(f"{path}.{bad.where}: {bad.problem}") from None


def _walk(message: Message) -> None:
    plan = _PLANS.get(message.DESCRIPTOR) or _plan(message.DESCRIPTOR)
    for descriptor, value in message.ListFields():
        entry = plan[descriptor]
        kind = entry.kind
        if kind == _SCALAR:
            problem = entry.check(value)
            if problem is not None:
                raise _BadValueError(entry.name, problem)
        elif kind == _MESSAGE:
            _nested(entry.name, value)
        else:
            if len(value) > entry.limit:
                raise _BadValueError(entry.name, f"{len(value)} entries, at most {entry.limit}")
            if kind == _REPEATED_MESSAGE:
                for index, item in enumerate(value):
                    _nested(f"{entry.name}[{index}]", item)
            elif kind == _REPEATED_SCALAR:
                for index, item in enumerate(value):
                    problem = entry.check(item)
                    if problem is not None:
                        raise _BadValueError(f"{entry.name}[{index}]", problem)
            else:
                for key, item in value.items():
                    problem = _check_string(key, MAX_STRING) or entry.check(item)
                    if problem is not None:
                        raise _BadValueError(f"{entry.name}[{str(key)[:64]!r}]", problem)


@dataclass(frozen=True, slots=True)
class _FastPlan:
    doubles: Callable[[Any], tuple[float, ...]] | None
    ratios: Callable[[Any], tuple[float, ...]] | None
    uints: Callable[[Any], tuple[int, ...]] | None
    strings: Callable[[Any], tuple[str, ...]] | None
    string_limit: int
    # (attribute, limit, kind): repeated and map fields, whose sizes and items need checks.
    repeated: tuple[tuple[str, int, int, Descriptor | None], ...]
    messages: tuple[tuple[str, Descriptor], ...]
    fallback: bool  # a map or an unusual field: always walk


_FAST: dict[Any, _FastPlan] = {}
_R_MESSAGE, _R_STRING, _R_UINT, _R_MAP_UINT, _R_MAP_STRING = range(5)


def _fast_ok(message: Message) -> bool:
    return _fast_ok_many(message.DESCRIPTOR, [message])


def _fast_ok_many(descriptor: Any, messages: list[Any]) -> bool:
    """Check all messages of one type together: one pass per field group, not per message."""
    plan = _FAST.get(descriptor) or _fast_plan(descriptor)
    if plan.fallback:
        return False
    if not messages:
        return True
    if plan.doubles is not None:
        values = list(chain.from_iterable(map(plan.doubles, messages)))
        total = sum(values)
        if not (math.isfinite(total) and min(values) >= 0.0):
            return False
    if plan.ratios is not None:
        values = list(chain.from_iterable(map(plan.ratios, messages)))
        if not (min(values) >= 0.0 and max(values) <= 1.0 and not math.isnan(sum(values))):
            return False
    if plan.uints is not None and max(chain.from_iterable(map(plan.uints, messages))) >= NEGATIVE_UINT:
        return False
    if plan.strings is not None and max(map(len, chain.from_iterable(map(plan.strings, messages)))) > plan.string_limit:
        return False
    for name, limit, kind, child in plan.repeated:
        lists = list(map(operator.attrgetter(name), messages))
        if max(map(len, lists)) > limit:
            return False
        items = list(chain.from_iterable(lists))
        if not items:
            continue
        if kind == _R_MESSAGE:
            assert child is not None
            if not _fast_ok_many(child, items):
                return False
        elif kind == _R_STRING:
            if max(map(len, items)) > MAX_STRING:
                return False
        elif kind == _R_UINT:
            if max(items) >= NEGATIVE_UINT:
                return False
        else:  # maps: keys, then values
            if max(map(len, items)) > MAX_STRING:
                return False
            map_values: list[Any] = list(chain.from_iterable(m.values() for m in lists))
            if kind == _R_MAP_UINT and max(map_values) >= NEGATIVE_UINT:
                return False
            if kind == _R_MAP_STRING and max(map(len, map_values)) > MAX_LONG_STRING:
                return False
    for name, child in plan.messages:
        present = [getattr(m, name) for m in messages if m.HasField(name)]
        if present and not _fast_ok_many(child, present):
            return False
    return True


def _fast_plan(descriptor: Descriptor) -> _FastPlan:
    doubles: list[str] = []
    ratios: list[str] = []
    uints: list[str] = []
    strings: list[str] = []
    repeated: list[tuple[str, int, int, Descriptor | None]] = []
    messages: list[tuple[str, Descriptor]] = []
    fallback = False
    limit = MAX_STRING
    for field in descriptor.fields:
        qualified = f"{descriptor.name}.{field.name}"
        bound = REPEATED_LIMITS.get(qualified, MAX_REPEATED)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_type = field.message_type.fields_by_name["value"].type
            if value_type == FieldDescriptor.TYPE_UINT64:
                repeated.append((field.name, bound, _R_MAP_UINT, None))
            elif value_type == FieldDescriptor.TYPE_STRING:
                repeated.append((field.name, bound, _R_MAP_STRING, None))
            else:
                fallback = True
        elif field.is_repeated:
            if field.message_type is not None:
                repeated.append((field.name, bound, _R_MESSAGE, field.message_type))
            elif field.type == FieldDescriptor.TYPE_STRING:
                repeated.append((field.name, bound, _R_STRING, None))
            elif field.type == FieldDescriptor.TYPE_UINT64:
                repeated.append((field.name, bound, _R_UINT, None))
            else:
                fallback = True
        elif field.message_type is not None:
            messages.append((field.name, field.message_type))
        elif field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            (ratios if field.name.endswith("_ratio") else doubles).append(field.name)
        elif field.type in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
            uints.append(field.name)
        elif field.type == FieldDescriptor.TYPE_STRING:
            strings.append(field.name)
            if qualified in LONG_STRINGS:
                limit = MAX_LONG_STRING
        elif field.type == FieldDescriptor.TYPE_BYTES:
            fallback = True
    plan = _FastPlan(
        doubles=_getter(doubles), ratios=_getter(ratios), uints=_getter(uints), strings=_getter(strings),
        string_limit=limit, repeated=tuple(repeated), messages=tuple(messages), fallback=fallback,
    )  # fmt: skip
    _FAST[descriptor] = plan
    return plan


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]] | None:
    if not names:
        return None
    # attrgetter of one name returns the value, not a 1-tuple; repeat it to keep tuples.
    return operator.attrgetter(*names) if len(names) > 1 else operator.attrgetter(names[0], names[0])


def _nested(name: str, message: Message) -> None:
    try:
        _walk(message)
    except _BadValueError as bad:
        raise _BadValueError(f"{name}.{bad.where}", bad.problem) from None


def _plan(descriptor: Any) -> dict[Any, _Field]:
    plan = {field: _field_plan(descriptor, field) for field in descriptor.fields}
    _PLANS[descriptor] = plan
    return plan


def _field_plan(owner: Descriptor, field: FieldDescriptor) -> _Field:
    qualified = f"{owner.name}.{field.name}"
    limit = REPEATED_LIMITS.get(qualified, MAX_REPEATED)
    message_type = field.message_type
    if message_type is not None and message_type.GetOptions().map_entry:
        return _Field(field.name, _MAP, _scalar_checker(message_type.fields_by_name["value"], qualified), limit)
    repeated = field.is_repeated
    if message_type is not None:
        return _Field(field.name, _REPEATED_MESSAGE if repeated else _MESSAGE, _accept, limit)
    return _Field(field.name, _REPEATED_SCALAR if repeated else _SCALAR, _scalar_checker(field, qualified), limit)


def _scalar_checker(field: FieldDescriptor, qualified: str) -> _Checker:
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return _check_ratio if field.name.endswith("_ratio") else _check_double
    if field.type in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return _check_uint64
    if field.type == FieldDescriptor.TYPE_STRING:
        limit = MAX_LONG_STRING if qualified in LONG_STRINGS else MAX_STRING
        return lambda value: _check_string(value, limit)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return lambda value: _check_string(value, MAX_LONG_STRING)
    return _accept


def _check_double(value: float) -> str | None:
    if value >= 0.0 and value != math.inf:  # false for NaN too
        return None
    return f"{value!r} is not a finite, non-negative number"


def _check_ratio(value: float) -> str | None:
    return None if 0.0 <= value <= 1.0 else f"{value!r} is not a ratio in [0, 1]"


def _check_uint64(value: int) -> str | None:
    return None if value < NEGATIVE_UINT else f"{value} is a negative count sent as unsigned"


def _check_string(value: str | bytes, limit: int) -> str | None:
    return None if len(value) <= limit else f"{len(value)} characters, at most {limit}"


def _accept(_value: object) -> str | None:
    return None
