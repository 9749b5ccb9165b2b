"""Protobuf messages as plain Python values (numbers stay numbers, unset optionals are
left out), for JSON output meant for people and scripts rather than for protobuf's own
JSON mapping (which writes 64-bit integers as strings)."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message


def to_plain(msg: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in msg.DESCRIPTOR.fields:
        name = field.name
        value = getattr(msg, name)
        message_type = field.message_type
        is_message = message_type is not None
        if message_type is not None and message_type.GetOptions().map_entry:
            value_field = message_type.fields_by_name["value"]
            if value_field.message_type is not None:
                out[name] = {k: to_plain(v) for k, v in value.items()}
            else:
                out[name] = dict(value)
        elif field.is_repeated:
            out[name] = [to_plain(v) for v in value] if is_message else list(value)
        elif field.has_presence and not msg.HasField(name):
            continue
        elif is_message:
            out[name] = to_plain(value)
        else:
            out[name] = value
    return out
