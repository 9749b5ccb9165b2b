"""How a report travels on the ingest stream: the method, and the frame around a serialized report.

The agent's sender writes frames (``frame_report``) straight from the spool's bytes, without
decoding and re-encoding each report; the load generator and tests speak the same stream.
"""

from __future__ import annotations

from typing import Final

STREAM_METHOD: Final = "/nodeagent.v1.Ingest/Stream"
# The response header with which the collector says it accepted a stream (after the hello): the
# agent waits for it before writing reports, so a refusal reaches it as its own status.
STREAM_ACCEPTED_HEADER: Final = "nodeagent-stream"
# The trailing metadata with which a collector's front sends a stream to the worker that owns its
# node (status UNAVAILABLE): the worker's port on the same host the agent dialled. The agent
# follows it once, at once, for that session (docs/fleet-scale.md).
OWNER_PORT_TRAILER: Final = "nodeagent-owner-port"
_REPORT_TAG: Final = b"\x12"  # AgentMessage.report: field 2, length-delimited


def frame_report(data: bytes) -> bytes:
    """An ``AgentMessage(report=...)`` around an already serialized report, without re-encoding it."""
    return _REPORT_TAG + _varint(len(data)) + data


def passthrough(data: bytes) -> bytes:
    """The request serializer for frames that are already bytes."""
    return data


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
