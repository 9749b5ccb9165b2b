"""What the ingest side hands the remote-write process: one record a message, on a unix
``SOCK_SEQPACKET`` socket (``process.py`` writes, ``child.py`` reads).

- A report: ``b"R"``, the length of the verdict's bytes (4 bytes, little-endian), the verdict as
  ``marshal`` of its ``VerdictRow`` (plain values: a microsecond or two, and made once per new
  verdict, not per report), then the report exactly as the agent sent it (the bytes ingest
  parsed: no second serialization).
- A node's topology: ``b"I"``, the node id's length (2 bytes), the node id, its ``NodeInfo``
  as the agent sent it; only to a restarted process, before the node's next report (reports
  carry it only when it changes, and the series' labels come from it).
- The job roll-up's snapshot: ``b"J"`` and the ``JobVerdict`` tuple pickled, once per
  evaluation (a handful a second at most).
- A node's GPU-seconds by job and category (the history's split of its closed minutes,
  ``history/counters.py``): ``b"L"``, the node id's length (2 bytes), the node id, ``marshal`` of
  ``{job: (seconds per category, ...)}``; before the node's next report once a minute closed.

A seqpacket message arrives whole or not at all, so a record never straddles two reads and a
send that would not fit fails at once (``BlockingIOError``) instead of writing half of it.
"""

from __future__ import annotations

import marshal
import pickle
import struct
from typing import Final, cast

from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.collector.remote_write.series import VerdictRow
from nodeagent.v1 import nodeagent_pb2 as pb

REPORT: Final = b"R"
JOBS: Final = b"J"
INFO: Final = b"I"
LEDGER: Final = b"L"
_LENGTH = struct.Struct("<I")
_NODE_LENGTH = struct.Struct("<H")


def report_record(verdict: bytes, raw: bytes) -> bytes:
    """A report's record from its verdict's bytes (``verdict_bytes``) and the report's own."""
    return b"".join((REPORT, _LENGTH.pack(len(verdict)), verdict, raw))


def verdict_bytes(row: VerdictRow | None) -> bytes:
    return marshal.dumps(row)


def info_record(node_id: str, info: bytes) -> bytes:
    node = node_id.encode()
    return b"".join((INFO, _NODE_LENGTH.pack(len(node)), node, info))


def read_info(record: bytes | memoryview) -> tuple[str, pb.NodeInfo]:
    (length,) = _NODE_LENGTH.unpack_from(record, 1)
    start = 1 + _NODE_LENGTH.size
    node_id = bytes(record[start : start + length]).decode()
    return node_id, pb.NodeInfo.FromString(bytes(record[start + length :]))


def ledger_record(node_id: str, totals: dict[str, list[float]]) -> bytes:
    node = node_id.encode()
    plain = {job: tuple(values) for job, values in totals.items()}
    return b"".join((LEDGER, _NODE_LENGTH.pack(len(node)), node, marshal.dumps(plain)))


def read_ledger(record: bytes | memoryview) -> tuple[str, dict[str, tuple[float, ...]]]:
    (length,) = _NODE_LENGTH.unpack_from(record, 1)
    start = 1 + _NODE_LENGTH.size
    node_id = bytes(record[start : start + length]).decode()
    totals = marshal.loads(record[start + length :])
    if not isinstance(totals, dict):
        raise ValueError("a ledger record that is not a table of jobs")
    return node_id, cast("dict[str, tuple[float, ...]]", totals)


def jobs_record(snapshot: tuple[JobVerdict, ...]) -> bytes:
    return JOBS + pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)


def read_report(record: bytes | memoryview) -> tuple[pb.NodeReport, VerdictRow | None]:
    """The report and its verdict row; ``DecodeError`` or ``ValueError`` on bytes that are not one."""
    (length,) = _LENGTH.unpack_from(record, 1)
    start = 1 + _LENGTH.size
    row = marshal.loads(record[start : start + length])
    report = pb.NodeReport.FromString(bytes(record[start + length :]))
    return report, cast("VerdictRow | None", row)


def read_jobs(record: bytes | memoryview) -> tuple[JobVerdict, ...]:
    # Only ever from the collector that started this process, over a socketpair it made.
    return cast("tuple[JobVerdict, ...]", pickle.loads(record[1:]))
