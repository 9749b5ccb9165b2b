"""Proving a report valid from its bytes in a few C calls, before walking it field by field.

``validate``'s walk makes a Python object of every message and a tuple of every field of an
8-GPU report (``ListFields``: 100 messages and 480 fields for a 64-CPU host). The proof reads the
same rules with three C calls and a short Python walk over one message per *path* of the report
(14 for that report), not per instance:

1. The report's bytes parse into a shadow type (``P``) that declares each field with a rule
   ``repeated``, and each field holding messages as *one* message of its type's shadow. A parser
   merges the occurrences of a singular message field, so every instance at a path (64
   ``CpuTimes``, 8 ``GpuSample``) becomes one message holding all their values.
2. Serialized, each number field of that is one packed block; parsed into a second shadow
   (``B``) that declares it ``bytes``, each block is one Python ``bytes``.
3. ``_gather`` walks ``B``'s paths, reading each message's blocks and strings with one
   ``attrgetter``; then all doubles of the report are checked by one regular expression over
   their top bytes, all ratios by one ``fullmatch``, all floats as the doubles, all strings by
   their longest, all names by one ``isprintable``. A uint64 at or above 2^63 is a ten-byte
   varint, looked for in the report's bytes. Lists of messages are bounded by how often their
   tag occurs in the report's bytes, counted on the report itself only where that is over.

It only proves. A report it cannot prove valid (a value at a bound's edge, a string long in UTF-8,
a kind of field it has no check for) is walked by ``validate``, which names the refusal: the
proof may fail to prove a valid report, never prove an invalid one (``tests/core/
test_validate_proof.py`` breaks each rule in each message at each path it applies to, and
asserts that). Each field's rule is ``validate._kind``'s; a field of a kind the walk has no rule
for turns the proof off, so that the walk raises as before. Collector-only (the agent repairs
its reports with the walk): it imports ``descriptor_pb2`` to make the shadows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any, cast

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from nodeagent.core.wire import validate as rules
from nodeagent.v1 import nodeagent_pb2 as pb

_Field = descriptor_pb2.FieldDescriptorProto
# Number kinds, packed in ``P`` as these types, each read from ``B`` as one ``bytes``; in this order.
_NUMBERS = {
    rules._UINT: _Field.TYPE_UINT64, rules._DOUBLE: _Field.TYPE_DOUBLE, rules._RATIO: _Field.TYPE_DOUBLE,
    rules._REPEATED_FLOAT: _Field.TYPE_FLOAT, rules._REPEATED_UINT: _Field.TYPE_UINT32,
}  # fmt: skip
_STRINGS = (rules._KEY, rules._STRING, rules._REPEATED_STRING)
_MESSAGES = (rules._MESSAGE, rules._REPEATED_MESSAGE, rules._FLAT, rules._MAP_UINT, rules._MAP_STRING)
_LISTS = (rules._REPEATED_STRING, rules._REPEATED_UINT, rules._REPEATED_FLOAT)
_RANK = {kind: rank for rank, kind in enumerate((*_NUMBERS, *_STRINGS, rules._FLAT))}
_CHECKED = (rules._DOUBLE, rules._RATIO, rules._REPEATED_FLOAT, rules._KEY)

# A uint64 at or above 2^63 is a varint of ten bytes, nine with the continuation bit: in bytes with
# each byte at or above 0x80 made 1 and every other 0, nine ones in a row.
_CONTINUES = bytes.maketrans(bytes(range(256)), bytes(128) + b"\x01" * 128)
_NINE = b"\x01" * 9
# A top byte at or above 0x7f (of a double's 8, a float's 4): negative, NaN, infinite, or beyond
# 2^1009 (2^127), which the walk then judges.
_NOT_BELOW_7F = re.compile(rb"[\x7f-\xff]").search
# Little-endian doubles in [0, 1]: top byte below 0x3f, or 0x3f with the next below 0xf0, or 1.0.
_RATIOS = re.compile(rb"(?:[\x00-\xff]{6}(?:[\x00-\xff][\x00-\x3e]|[\x00-\xef]\x3f)|\x00{6}\xf0\x3f)*").fullmatch
_ALL = itemgetter(slice(None))  # a container's values as a list: upb's have no __iter__ (a raised IndexError ends one)


class _Shape:
    """One message type's shadows (``flat``: as the entries of a list of its own type, which may
    have no such list of their own) and where in what ``read`` returns each check looks."""

    def __init__(self, descriptor: Descriptor, flat: bool) -> None:
        self.descriptor = descriptor
        self.flat = flat
        self.name = f"{descriptor.name}{'_flat' if flat else ''}"
        self.read: Callable[[Any], tuple[Any, ...]] = tuple
        self.takes: list[tuple[int, slice]] = []  # (kind, where): values each batched check takes
        self.lists: list[tuple[int, int, str, int]] = []  # position, kind, name, limit
        self.list_strings: list[int] = []  # where lists of strings are (their entries are checked)
        self.empty: int | None = None  # a flat list's entries: where their own list is read
        self.read_texts: Callable[[Any], tuple[Any, ...]] = tuple
        self.texts: list[FieldDescriptor] = []  # names and strings (and lists of strings: in read)
        self.keys: slice | None = None  # where the names are, in what read_texts returns
        self.strings: list[tuple[int, slice]] = []  # (longest, where), in what read_texts returns
        self.shortest = 0  # the least of the strings' bounds
        # name, its shape, the entries allowed (a list; else None) and its tag, as the wire has it
        self.children: list[tuple[str, _Shape, int | None, bytes]] = []


class _Found:
    """What the walk over a report's paths collected for the batched checks."""

    __slots__ = ("blocks", "instances", "report", "serialized", "strings")

    def __init__(self, report: Message, serialized: bytes) -> None:
        self.serialized = serialized
        self.blocks: dict[int, list[Any]] = {kind: [] for kind in _CHECKED}
        self.strings: dict[int, list[Any]] = {}
        self.report = report
        self.instances: dict[tuple[tuple[str, bool], ...], list[Any]] = {(): [report]}


def check_report(report: pb.NodeReport, node_id: str, serialized: bytes) -> None:
    """``validate.check_report`` (the same refusals, with the same words), the walk left out where
    ``serialized`` (the report's bytes, as ``SerializeToString`` gives them) proves it passes."""
    rules.check_header(report, node_id)
    if not proves_valid(report, serialized):
        rules.check_body(report)


def proves_valid(report: pb.NodeReport, serialized: bytes) -> bool:
    """True if ``report`` (``serialized``: its bytes, as ``SerializeToString`` gives them) passes
    every rule of ``validate``'s walk; False if it may not (the walk then decides)."""
    if _ROOT is None:
        return False
    packed, blocks, shape = _ROOT
    if _NINE in serialized.translate(_CONTINUES):
        return False  # a uint64 at or above 2^63, or bytes of a string or a double that look like one
    found = _Found(report, serialized)
    try:
        merged = blocks(packed(serialized).SerializeToString())
    except DecodeError:  # bytes not of a report (the walk judges the report itself)
        return False
    if not _gather(merged, shape, (), found):
        return False
    taken = found.blocks
    return not (
        _NOT_BELOW_7F(b"".join(taken[rules._DOUBLE])[7::8])
        or _NOT_BELOW_7F(b"".join(taken[rules._REPEATED_FLOAT])[3::4])
        or not _RATIOS(b"".join(taken[rules._RATIO]))
        or not _printable(b"".join(chain.from_iterable(map(_ALL, taken[rules._KEY]))))
        or any(
            max(map(len, chain.from_iterable(map(_ALL, containers))), default=0) > longest
            for longest, containers in found.strings.items()
        )
    )


def _gather(message: Any, shape: _Shape, path: tuple[tuple[str, bool], ...], found: _Found) -> bool:
    """Collect one path's values for the batched checks; count its lists; then its children's."""
    values = shape.read(message)
    blocks = found.blocks
    for kind, where in shape.takes:
        blocks[kind] += values[where]
    for position, kind, name, limit in shape.lists:
        value = values[position]
        # Merged, the path's instances' lists together; over the bound, count each instance's.
        count = len(value) // 4 if kind == rules._REPEATED_FLOAT else len(value)
        if count > limit and _most(found, path, name) > limit:
            return False
    if shape.empty is not None and values[shape.empty]:
        return False  # a MIG instance with instances of its own
    for position in shape.list_strings:
        found.strings.setdefault(rules.MAX_STRING, []).append(values[position])
    # Strings: not read where the path's instances together are shorter than the shortest bound.
    if shape.texts and (shape.keys is not None or shape.children or message.ByteSize() > shape.shortest):
        texts = shape.read_texts(message)
        if shape.keys is not None:
            blocks[rules._KEY] += texts[shape.keys]
        for longest, where in shape.strings:
            found.strings.setdefault(longest, []).extend(texts[where])
    for name, child, entries, tag in shape.children:
        if message.HasField(name):
            if entries is not None and _over(found, path, name, tag, entries):
                return False
            if not _gather(getattr(message, name), child, (*path, (name, entries is not None)), found):
                return False
    return True


def _over(found: _Found, path: tuple[tuple[str, bool], ...], name: str, tag: bytes, limit: int) -> bool:
    """Whether an instance at ``path`` has more than ``limit`` entries in its list ``name``. Each
    entry begins with the tag's bytes, so the report holds them at least as often as there are
    entries (more often: in other values); where they are more than the bound, count each."""
    serialized = found.serialized
    if 2 * limit >= len(serialized):
        return False  # an entry is at least two bytes (its tag and length)
    if not path:
        return len(getattr(found.report, name)) > limit  # the report's own: counted there (a scan costs more)
    return serialized.count(tag) > limit and _most(found, path, name) > limit


def _most(found: _Found, path: tuple[tuple[str, bool], ...], name: str) -> int:
    """The most entries the list ``name`` has in any instance at ``path``, counted on the report."""
    return max(map(len, map(attrgetter(name), _instances(found, path))), default=0)


def _instances(found: _Found, path: tuple[tuple[str, bool], ...]) -> list[Any]:
    """The report's messages at ``path`` (each step: a field, and whether it is a list)."""
    instances = found.instances.get(path)
    if instances is None:
        field, is_list = path[-1]
        values = map(attrgetter(field), _instances(found, path[:-1]))
        instances = list(chain.from_iterable(map(_ALL, values))) if is_list else list(values)
        found.instances[path] = instances
    return instances


def _printable(names: bytes) -> bool:
    try:
        return names.decode().isprintable()
    except UnicodeDecodeError:
        return False


# ---- the shadows, made once from the descriptors ----


def _make_root() -> tuple[Callable[[bytes], Any], Callable[[bytes], Any], _Shape] | None:
    file = descriptor_pb2.FileDescriptorProto(name="nodeagent/wire_proof.proto", package="proof", syntax="proto3")
    shapes: dict[tuple[str, bool], _Shape] = {}
    try:
        root = _declare(cast(Descriptor, pb.NodeReport.DESCRIPTOR), False, file, shapes)
    except TypeError:
        return None  # a kind the walk has no rule for: it raises when a report sets one
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    packed, blocks = (message_factory.GetMessageClass(pool.FindMessageTypeByName(f"proof.{side}{root.name}"))
                      for side in "PB")  # fmt: skip
    return packed.FromString, blocks.FromString, root


def _declare(descriptor: Descriptor, flat: bool, file: Any, shapes: dict[tuple[str, bool], _Shape]) -> _Shape:
    """The shape of ``descriptor`` and its two shadows in ``file`` (and those of every type below it)."""
    shape = shapes.get((descriptor.full_name, flat))
    if shape is not None:
        return shape
    shape = shapes[(descriptor.full_name, flat)] = _Shape(descriptor, flat)
    packed = file.message_type.add(name=f"P{shape.name}")
    blocks = file.message_type.add(name=f"B{shape.name}")
    read: list[tuple[FieldDescriptor, int, int]] = []
    for field, kind, limit in _ruled(descriptor):
        own_list = f"{descriptor.name}.{field.name}" in rules.FLAT_LISTS
        if kind in _MESSAGES and not (flat and own_list):
            child = _declare(cast(Descriptor, field.message_type), own_list, file, shapes)
            for side, shadow in (("P", packed), ("B", blocks)):
                shadow.field.add(name=field.name, number=field.number, type=_Field.TYPE_MESSAGE,
                                 type_name=f".proof.{side}{child.name}")  # fmt: skip
            shape.children.append((field.name, child, None if kind == rules._MESSAGE else limit, _tag(field.number)))
            continue
        if kind in (rules._OTHER, rules._UINT):  # no rule, or one checked on the report's bytes: not read
            packed.field.add(name=field.name, number=field.number, label=_Field.LABEL_REPEATED, type=_Field.TYPE_UINT64)
            blocks.field.add(name=field.name, number=field.number, type=_Field.TYPE_BYTES)
            continue
        number = _NUMBERS.get(kind)
        packed.field.add(name=field.name, number=field.number, label=_Field.LABEL_REPEATED,
                         type=number or _Field.TYPE_BYTES)  # fmt: skip
        blocks.field.add(name=field.name, number=field.number, type=_Field.TYPE_BYTES,
                         label=_Field.LABEL_OPTIONAL if number else _Field.LABEL_REPEATED)  # fmt: skip
        read.append((field, kind, limit))
    read.sort(key=lambda fkl: (_RANK[fkl[1]], _longest(fkl[1], fkl[2])))
    _place(shape, read)
    return shape


def _place(shape: _Shape, read: list[tuple[FieldDescriptor, int, int]]) -> None:
    """Where each check finds its values: in what ``shape.read`` returns (numbers, lists of
    strings, a flat list) or ``shape.read_texts`` (names and strings)."""
    texts = [fkl for fkl in read if fkl[1] in (rules._KEY, rules._STRING)]
    read = [fkl for fkl in read if fkl[1] not in (rules._KEY, rules._STRING)]
    for kind in (rules._DOUBLE, rules._RATIO, rules._REPEATED_FLOAT):
        positions = [position for position, (_f, k, _l) in enumerate(read) if k == kind]
        if positions:
            shape.takes.append((kind, slice(positions[0], positions[-1] + 1)))
    for position, (field, kind, limit) in enumerate(read):
        if kind in _LISTS:
            shape.lists.append((position, kind, field.name, limit))
        if kind == rules._REPEATED_STRING:  # each entry at most MAX_STRING, checked with the strings
            shape.list_strings.append(position)
        if kind == rules._FLAT:
            shape.empty = position
    keys = [position for position, (_f, kind, _l) in enumerate(texts) if kind == rules._KEY]
    shape.keys = slice(keys[0], keys[-1] + 1) if keys else None
    for position, (field, _kind, limit) in enumerate(texts):
        shape.texts.append(field)
        if shape.strings and shape.strings[-1][0] == limit and shape.strings[-1][1].stop == position:
            shape.strings[-1] = (limit, slice(shape.strings[-1][1].start, position + 1))
        else:
            shape.strings.append((limit, slice(position, position + 1)))
    shape.shortest = min((limit for _f, _k, limit in texts), default=0)
    shape.read = _getter([field.name for field, _k, _l in read])
    shape.read_texts = _getter([field.name for field, _k, _l in texts])


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """``attrgetter`` of ``names``, always returning a tuple."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda message: (one(message),)
    return lambda _message: ()


def _ruled(descriptor: Descriptor) -> list[tuple[FieldDescriptor, int, int]]:
    """Each field with a rule, its kind and limit (``validate._kind``); a map's string values may
    be long (the walk bounds them by ``MAX_LONG_STRING``, not as their entry type's field)."""
    kinds = []
    is_entry = descriptor.GetOptions().map_entry
    for field in descriptor.fields:
        is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
        kind, limit = rules._kind(field, is_map=is_map)
        if is_entry and field.name == "value" and kind == rules._STRING:
            limit = rules.MAX_LONG_STRING
        kinds.append((field, kind, limit))
    return kinds


def _tag(number: int) -> bytes:
    """The varint a length-delimited field's entries begin with."""
    tag, out = number << 3 | 2, bytearray()
    while tag > 0x7F:
        out.append(tag & 0x7F | 0x80)
        tag >>= 7
    out.append(tag)
    return bytes(out)


def _longest(kind: int, limit: int) -> int:
    """The longest string a field's values may be (a list of strings: each ``MAX_STRING``)."""
    return rules.MAX_STRING if kind == rules._REPEATED_STRING else limit


_ROOT = _make_root()
