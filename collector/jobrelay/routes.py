"""Where the job roll-up's messages go, as seen from one process.

A job's owner is the first of ``[fleet] collectors`` that rendezvous hashing of the job key ranks
(the one this process belongs to when there is no fleet), skipping those marked down, and on that
collector the worker ``owner_index(job, workers)``: every node stage of every collector picks the
same owner for a job, and a collector that goes away moves only the jobs it owned, each to the
same next one. A node's home is where its stage said it lives (``Home``).

Each list must be given the same way on every collector (the same ``HOST:PORT`` strings), as the
agents' ``--collector`` list: the weights hash the strings.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from nodeagent.collector.jobs.messages import Home
from nodeagent.collector.tenants import raw_key
from nodeagent.core.transport.rendezvous import owner_index, rendezvous_order


@dataclass(frozen=True, slots=True)
class Place:
    """A process messages go to: a worker of this collector (``collector`` "") or another
    collector of the fleet (``worker`` -1: its front picks the worker by the message's key)."""

    collector: str
    worker: int


class Routes:
    def __init__(
        self, *, worker: int = 0, workers: int = 1, fleet: tuple[str, ...] = (), me: str = "",
        tenants: frozenset[str] = frozenset(),
    ) -> None:  # fmt: skip
        """``fleet``: ``[fleet] collectors``; ``me``: this collector's entry there ("" when it is not in it);
        ``tenants``: a job is routed by its key without its tenant's scope, so the jobs of every
        tenant that name one key meet at one owner (which tells them apart, and says so)."""
        self.worker = worker
        self.tenants = tenants
        self.workers = max(1, workers)
        self.me = me
        # A fleet counts only when this collector is in it: else it cannot tell its own jobs.
        self.fleet = fleet if me and len(fleet) > 1 else ()

    def owner(self, job: str, down: Container[str] = ()) -> Place:
        job = raw_key(job, self.tenants)
        if self.fleet:
            for collector in rendezvous_order(job, self.fleet):
                if collector == self.me:
                    break
                if collector not in down:
                    return Place(collector, -1)
        return Place("", owner_index(job, self.workers))

    def home(self, home: Home) -> Place:
        if not home.collector or home.collector == self.me:
            return Place("", home.worker)
        return Place(home.collector, home.worker)

    def is_here(self, place: Place) -> bool:
        return not place.collector and place.worker == self.worker

    def home_seen_from_elsewhere(self) -> Home:
        """This process as a home that another collector can send back to."""
        return Home(self.me, self.worker)
