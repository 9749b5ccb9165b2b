"""Where the daemon's reports come from: the live sampler or the simulator, behind one protocol.

The source owns the report sequence: it stamps every report with its agent epoch and the next
sequence number (``ReportSequence``). ``nodeagent run`` starts the sequence where the spool left
off (the epoch and next seq it recovered), so the spool only checks that reports follow each other.
"""

from __future__ import annotations

from typing import Protocol

from nodeagent.v1 import nodeagent_pb2 as pb


class ReportSequence:
    """An agent epoch and the sequence numbers of its reports, counting up by one from ``next_seq``."""

    def __init__(self, epoch: int = 1, next_seq: int = 1) -> None:
        if epoch < 1 or next_seq < 1:
            raise ValueError(f"epoch {epoch} and next seq {next_seq} must be at least 1")
        self.epoch = epoch
        self._next_seq = next_seq

    @property
    def last_seq(self) -> int:
        """The seq of the latest report stamped (0 before the first)."""
        return self._next_seq - 1

    def stamp(self, report: pb.NodeReport) -> None:
        """Give ``report`` this epoch and the next seq."""
        report.epoch, report.seq = self.epoch, self._next_seq
        self._next_seq += 1


class ReportSource(Protocol):
    """What ``nodeagent run`` samples each tick: ``nodeagent.agent.sampling.sampler.Sampler`` or the simulator's
    ``SimulatedSampler``."""

    node_id: str
    # The node's topology as of the latest scan: the hello of every stream.
    info: pb.NodeInfo
    sequence: ReportSequence

    def tick(self) -> pb.NodeReport:
        """One report of the node, stamped by ``sequence``; carries ``info`` when it changed."""
        ...

    def close(self) -> None: ...
