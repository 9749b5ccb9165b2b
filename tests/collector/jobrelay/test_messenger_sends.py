"""The messenger's one batched send (``JobMessenger._send``), for both kinds of message: what is
not delivered to a worker is dropped and counted; steps a collector did not take go at once to
the next collector their jobs' keys rank (here: this one), while waits are dropped."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from nodeagent.collector.jobrelay.messenger import JobMessenger
from nodeagent.collector.jobrelay.routes import Routes
from nodeagent.collector.jobs.messages import Home, JobLeave, JobWait
from nodeagent.core.transport.rendezvous import rendezvous_order

DEAD = "127.0.0.1:1"  # nothing listens: a call fails at once


def fake_rollup() -> Any:
    received: list[Any] = []
    applied: list[Any] = []
    jobs = SimpleNamespace(receive=received.extend, got=received)
    nodes = SimpleNamespace(apply=applied.extend, got=applied)
    return SimpleNamespace(jobs=jobs, nodes=nodes)


def test_what_a_worker_does_not_take_is_dropped_and_counted(tmp_path: Path) -> None:
    rollup = fake_rollup()
    messenger = JobMessenger(rollup, Routes(worker=0, workers=2), sockets=[tmp_path / "w0", tmp_path / "w1"])
    job = next(j for j in (f"job-{i}" for i in range(100)) if messenger.routes.owner(j).worker == 1)
    messenger.to_owners([JobLeave(job, "n1", 1.0)])
    messenger.to_homes([JobWait(job, "n1", home=Home("", 1)), JobWait(job, "n2", home=Home("", 1))])

    async def flush() -> None:
        await messenger.flush()
        await messenger.close()

    asyncio.run(flush())
    assert (messenger.sent_total, messenger.dropped_total) == (0, 3)
    assert rollup.jobs.got == [] and rollup.nodes.got == []


def test_steps_a_collector_does_not_take_go_to_the_next_and_waits_are_dropped() -> None:
    rollup = fake_rollup()
    fleet = (DEAD, "me:1")
    messenger = JobMessenger(rollup, Routes(fleet=fleet, me="me:1"))
    job = next(j for j in (f"job-{i}" for i in range(100)) if rendezvous_order(j, fleet)[0] == DEAD)
    leave = JobLeave(job, "n1", 1.0)
    messenger.to_owners([leave])
    messenger.to_homes([JobWait(job, "n1", home=Home(DEAD, 0))])
    assert rollup.jobs.got == []

    async def flush() -> None:
        await messenger.flush()
        await messenger.close()

    asyncio.run(flush())
    # Passed over: judged here meanwhile (with this collector as its home, as sent elsewhere).
    assert [(m.job, m.node_id) for m in rollup.jobs.got] == [(job, "n1")]
    assert (messenger.sent_total, messenger.dropped_total) == (0, 1)
    assert rollup.nodes.got == []
