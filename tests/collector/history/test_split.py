"""The ledger's split as the history counts it: every held second in one category, per GPU-minute."""

from __future__ import annotations

import functools
import math
import sqlite3
from pathlib import Path

import pytest

from nodeagent.collector.history import split
from nodeagent.collector.history.batch import HistoryBatch
from nodeagent.collector.history.config import HistoryConfig
from nodeagent.collector.history.counters import SplitCounters
from nodeagent.collector.history.minutes import NODE_ROW, VALUES, MinuteRow
from nodeagent.collector.history.node_history import NodeHistory
from nodeagent.collector.store.database import Store
from nodeagent.core.detector.verdict import GpuVerdict, NodeVerdict
from nodeagent.v1 import nodeagent_pb2 as pb

NODE = "n1"
T0 = 1_800_000_000.0  # a minute's start


def _gpu(
    index: int, state: str, cause: str | None = None, ratio: float | None = None, **evidence: float | str
) -> GpuVerdict:
    return GpuVerdict(
        index=index, uuid=f"GPU-{index}", state=state, cause=cause, tier=None, starvation_ratio=ratio,
        interconnect_ratio=ratio if cause == "interconnect" else None, idle_ratio=ratio, gpu_seconds_lost=0.0,
        jobs=("job-1",), evidence=evidence,
    )  # fmt: skip


def _verdict(time: float, gpus: tuple[GpuVerdict, ...]) -> NodeVerdict:
    return NodeVerdict(NODE, time, gpus[0].state, None, None, None, None, 0.0, ("job-1",), None, {}, gpus)


def _report(time: float, gpus: int, unresponsive: frozenset[int] = frozenset()) -> pb.NodeReport:
    report = pb.NodeReport(node_id=NODE, epoch=1, seq=int(time), time_unix_seconds=time)
    for i in range(gpus):
        report.gpus.add(index=i, utilization_gpu_ratio=0.5, unresponsive=i in unresponsive)
    return report


def _run(
    times: list[float], gpus: tuple[GpuVerdict, ...], unresponsive: frozenset[int] = frozenset()
) -> list[MinuteRow]:
    history = NodeHistory(NODE, HistoryConfig(reports_seconds=0))
    for t in times:
        history.observe(_report(t, len(gpus), unresponsive), b"", _verdict(t, gpus))
    return history.take(math.inf).minutes


def _parts(row: MinuteRow) -> dict[str, float]:
    assert row.split is not None
    return {name: value for name, value in zip(split.CATEGORIES, row.split, strict=True) if value}


def test_each_state_splits_its_held_time_and_the_parts_add_up() -> None:
    gpus = (
        _gpu(0, "busy"),
        _gpu(1, "starved", "network", 0.34),
        _gpu(2, "waiting", wait_ratio=0.5, waiting_on="n7"),
        _gpu(3, "idle"),
        _gpu(4, "lost"),
        _gpu(5, "lost"),
        _gpu(6, "throttled", ratio=0.2),
        _gpu(7, "starved", "interconnect", 0.25),
    )
    rows = _run([T0 + s for s in range(60)], gpus, unresponsive=frozenset({5}))
    by_gpu = {row.gpu: row for row in rows if row.minute == T0}
    held = by_gpu[0].held_seconds
    assert held == pytest.approx(59.0)  # the first report stands for nothing before it
    assert _parts(by_gpu[0]) == {"computing": pytest.approx(held)}
    assert _parts(by_gpu[1]) == {"computing": pytest.approx(0.66 * held), "network": pytest.approx(0.34 * held)}
    assert _parts(by_gpu[2]) == {"computing": pytest.approx(0.5 * held), "waiting": pytest.approx(0.5 * held)}
    assert by_gpu[2].waiting_on == "n7"
    assert _parts(by_gpu[3]) == {"idle": pytest.approx(held)}
    assert _parts(by_gpu[4]) == {"lost": pytest.approx(held)}
    assert _parts(by_gpu[5]) == {"unresponsive": pytest.approx(held)}
    assert _parts(by_gpu[6]) == {"computing": pytest.approx(0.8 * held), "throttled": pytest.approx(0.2 * held)}
    assert _parts(by_gpu[7]) == {"computing": pytest.approx(0.75 * held), "interconnect": pytest.approx(0.25 * held)}
    node = by_gpu[NODE_ROW]
    assert node.split is not None
    assert sum(node.split) == pytest.approx(8 * held)
    assert node.split == pytest.approx(
        [sum(by_gpu[g].split[i] for g in range(8)) for i in range(len(split.CATEGORIES))]
    )  # type: ignore[index]


def test_a_gap_is_held_and_unknown_in_the_minutes_it_spans() -> None:
    """A silence of 201 s within one epoch: its last 10 s the next report's, the rest unknown,
    with rows of their own for the minutes no report fell in."""
    times = [T0 + s for s in range(30)] + [T0 + 230 + s for s in range(10)]
    rows = _run(times, (_gpu(0, "busy"),))
    gpu_rows = sorted((r for r in rows if r.gpu == 0), key=lambda r: r.minute)
    assert [r.minute - T0 for r in gpu_rows] == [0, 60, 120, 180]
    for row in gpu_rows:
        assert row.split is not None
        assert sum(row.split) == pytest.approx(row.held_seconds)
    unknown = sum(_parts(r).get("unknown", 0.0) for r in gpu_rows)
    assert unknown == pytest.approx(201.0 - 10.0)
    assert sum(r.held_seconds or 0.0 for r in gpu_rows) == pytest.approx(29 + 201 + 9)


def test_a_silence_past_the_gap_bound_is_not_held() -> None:
    rows = _run([T0, T0 + 1, T0 + 3600 + 5], (_gpu(0, "busy"),))
    held = sum(r.held_seconds or 0.0 for r in rows if r.gpu == 0)
    assert held == pytest.approx(1 + 900)  # the bound's 900 s: the node's last 10 s and 890 s unknown


def test_a_starved_gpu_with_no_cause_named_is_unknown_and_no_window_yet_computes() -> None:
    assert split.losses(_gpu(0, "starved", None, 0.4), False)[0] == (split.INDEX["unknown"], 0.4)
    assert split.losses(_gpu(0, "starved", "network", None), False)[0] == (split.INDEX["network"], 0.0)
    # Warm-up is not judged: unknown until a verdict judges it (``forming``).
    assert split.losses(_gpu(0, "warmup"), False) == ((split.INDEX["unknown"], 1.0),)


def test_a_gpu_starved_for_data_also_counts_its_wait_for_the_collective() -> None:
    """The simulated rental's truth: 38/112 waiting for the network, 14/112 for the all-reduce."""
    gpu = GpuVerdict(
        index=0, uuid="GPU-0", state="starved", cause="network", tier="high", starvation_ratio=38 / 112,
        interconnect_ratio=14 / 112, idle_ratio=52 / 112, gpu_seconds_lost=0.0, jobs=("j",), evidence={},
    )  # fmt: skip
    parts = split.empty()
    split.add(parts, gpu, 112.0, 0.0, unresponsive=False)
    assert parts[split.INDEX["network"]] == pytest.approx(38.0)
    assert parts[split.INDEX["interconnect"]] == pytest.approx(14.0)
    assert parts[split.INDEX["computing"]] == pytest.approx(60.0)


def test_the_store_keeps_the_split_and_an_older_table_gains_its_columns(tmp_path: Path) -> None:
    """Written and read back whole; a table from before the split (no such columns, and one that
    gained held_seconds last) gains them at start and its rows read with no split."""
    db = tmp_path / "c.db"
    with sqlite3.connect(db) as conn:  # as an older version made it: held_seconds added by ALTER
        conn.execute(
            "CREATE TABLE history_minutes (node_id TEXT NOT NULL, gpu INTEGER NOT NULL, minute INTEGER NOT NULL,"
            f" samples INTEGER NOT NULL, {', '.join(f'{name} REAL' for name in VALUES)}, state TEXT NOT NULL,"
            " cause TEXT NOT NULL, jobs TEXT NOT NULL, last_time REAL NOT NULL, PRIMARY KEY (node_id, minute, gpu))"
            " WITHOUT ROWID"
        )
        conn.execute("ALTER TABLE history_minutes ADD COLUMN held_seconds REAL")
        conn.execute(
            "INSERT INTO history_minutes (node_id, gpu, minute, samples, state, cause, jobs, last_time, held_seconds)"
            " VALUES ('old', 0, 60, 1, 'busy', '', 'j', 61.0, 30.0)"
        )
    store = Store(db)
    try:
        rows = _run(
            [T0 + s for s in range(5)],
            (
                _gpu(
                    0,
                    "starved",
                    "storage",
                    0.5,
                ),
            ),
        )
        rows[0].waiting_on = "n9"
        store.write((), before_commit=functools.partial(store.history.write, HistoryBatch(minutes=rows)))
        [old] = store.history.minutes("old", None, 0, None)
        assert old.held_seconds == 30.0 and old.split is None
        back = {r.gpu: r for r in store.history.minutes(NODE, None, 0, None)}
        for row in rows:
            assert back[row.gpu].split == pytest.approx(row.split)
        assert back[rows[0].gpu].waiting_on == "n9"
    finally:
        store.close()


def test_counters_add_closed_minutes_once_and_drop_a_job_an_hour_gone() -> None:
    counters = SplitCounters()
    busy = MinuteRow(NODE, 0, 60, jobs=("a", "b"), split=[60.0] + [0.0] * (len(split.CATEGORIES) - 1))
    counters.close([busy, MinuteRow(NODE, NODE_ROW, 60, jobs=("a", "b"), split=busy.split)])
    assert counters.totals() == {
        "a": pytest.approx([30.0] + [0.0] * (len(split.CATEGORIES) - 1)),
        "b": pytest.approx([30.0] + [0.0] * (len(split.CATEGORIES) - 1)),
    }
    open_row = MinuteRow(NODE, 0, 120, jobs=("a",), split=[0.0, 6.0] + [0.0] * (len(split.CATEGORIES) - 2))
    assert counters.totals([open_row])["a"][:2] == pytest.approx([30.0, 6.0])
    assert counters.totals()["a"][1] == 0.0  # the open minute is added when read, not kept
    later = MinuteRow(NODE, 0, 60 + 3600 + 60, jobs=("c",), split=[60.0] + [0.0] * (len(split.CATEGORIES) - 1))
    counters.close([later])
    assert set(counters.totals()) == {"c"}


def _history_run(steps: list[tuple[float, GpuVerdict]], window: float = 20.0) -> tuple[NodeHistory, list[MinuteRow]]:
    """Feed one GPU's verdicts; every row the flushes wrote, the last write of each minute winning."""
    history = NodeHistory(NODE, HistoryConfig(reports_seconds=0))
    written: dict[tuple[int, int], MinuteRow] = {}
    for t, g in steps:
        history.observe(_report(t, 1), b"", _verdict(t, (g,)), window)
        for row in history.take(0.0).minutes:
            written[(row.minute, row.gpu)] = row
    for row in history.take(math.inf).minutes:
        written[(row.minute, row.gpu)] = row
    return history, list(written.values())


def _total(rows: list[MinuteRow], category: str) -> float:
    return sum(_parts(r).get(category, 0.0) for r in rows if r.gpu == 0)


def test_warmup_takes_the_first_verdict_that_judges_it_and_a_state_entered_takes_its_window() -> None:
    starved = _gpu(0, "starved", "network", 0.5)
    steps = [(T0 + 30 + s, _gpu(0, "warmup")) for s in range(5)]
    steps += [(T0 + 35 + s, _gpu(0, "busy")) for s in range(25)]  # across the minute's end
    steps += [(T0 + 60 + s, starved) for s in range(20)]
    _history, rows = _history_run(steps)
    for row in rows:  # every minute's parts add up to its held time, GPU and node rows alike
        assert row.split is not None
        held = row.held_seconds if row.gpu == 0 else sum(r.held_seconds or 0 for r in rows if r.minute == row.minute)
        assert sum(row.split) == pytest.approx(held)
    # Held 49 s: 4 of warm-up (judged busy), 25 busy, 20 starved. The verdict at T0+60 judges
    # [T0+40, T0+60]: the 19 busy seconds in it are half network; the 10 before stay computing.
    assert _total(rows, "network") == pytest.approx(0.5 * 19 + 0.5 * 20)
    assert _total(rows, "unknown") == 0.0
    assert _total(rows, "computing") == pytest.approx(49 - 0.5 * 19 - 0.5 * 20)
    first = next(r for r in rows if r.gpu == 0 and r.minute == T0)
    # The closed minute was written again: its 19 re-judged seconds and the report at T0+60's own.
    assert _parts(first)["network"] == pytest.approx(0.5 * 20)


def test_warmup_no_verdict_judges_stays_unknown_never_computing() -> None:
    steps = [(T0 + s, _gpu(0, "warmup")) for s in range(10)] + [(T0 + 200 + s, _gpu(0, "warmup")) for s in range(3)]
    _history, rows = _history_run(steps)
    assert _total(rows, "computing") == 0.0
    assert _total(rows, "unknown") == pytest.approx(sum(r.held_seconds or 0 for r in rows if r.gpu == 0))


def test_unnamed_starvation_is_judged_by_the_wait_the_job_rollup_names() -> None:
    unnamed = _gpu(0, "starved", None, 0.1)
    waiting = _gpu(0, "waiting", wait_ratio=0.5, waiting_on="n7")
    _history, rows = _history_run([(T0 + s, unnamed) for s in range(10)] + [(T0 + 10 + s, waiting) for s in range(10)])
    assert _total(rows, "unknown") == 0.0
    assert _total(rows, "waiting") == pytest.approx(0.5 * 19)


def test_the_counters_never_go_down_while_a_verdict_moves_seconds() -> None:
    steps = [(T0 + 40 + s, _gpu(0, "busy")) for s in range(25)] + [
        (T0 + 65 + s, _gpu(0, "starved", "network", 0.5)) for s in range(80)
    ]
    history = NodeHistory(NODE, HistoryConfig(reports_seconds=0))
    before = split.empty()
    for t, g in steps:
        history.observe(_report(t, 1), b"", _verdict(t, (g,)), 20.0)
        now = history.gpu_seconds()["job-1"]
        assert all(b <= n + 1e-9 for b, n in zip(before, now, strict=True))
        before = now
    # A starved GPU's seconds may still take the job roll-up's share (job-wide) for a window: the
    # closed minute is kept until the next minute closes past that, then counted and let go.
    t = T0 + 185
    history.observe(_report(t, 1), b"", _verdict(t, (_gpu(0, "starved", "network", 0.5),)), 20.0)
    assert all(b <= n + 1e-9 for b, n in zip(before, history.gpu_seconds()["job-1"], strict=True))
    assert list(history.settling) == [T0 + 120]  # the minute just closed: its last seconds are new


def test_the_job_rollups_share_adds_what_the_own_verdict_does_not_count_never_a_second_twice() -> None:
    """A node of a job-wide slowdown: its own data share to its cause, the rest of the roll-up's
    measured wait to `waiting`; a link straggler busy on its own: the share to `interconnect`;
    a share below the verdict's own losses adds nothing."""
    wide = split.JobShare(0.55, "waiting")
    starved = split.with_share(_gpu(0, "starved", "network", 0.25), wide)
    assert split.shares(starved, False)[split.INDEX["network"]] == pytest.approx(0.25)
    assert split.shares(starved, False)[split.INDEX["waiting"]] == pytest.approx(0.30)
    busy = split.with_share(_gpu(0, "busy", None, 0.08), split.JobShare(0.52, "interconnect"))
    assert split.shares(busy, False)[split.INDEX["interconnect"]] == pytest.approx(0.52)
    small = split.with_share(_gpu(0, "starved", "network", 0.4), split.JobShare(0.3, "waiting"))
    assert split.shares(small, False)[split.INDEX["waiting"]] == 0.0
    # Idle, lost, waiting GPUs keep their own split: the share is for busy and starved ones.
    assert split.with_share(_gpu(0, "idle"), wide) == _gpu(0, "idle")
    for verdict in (starved, busy, small):
        assert sum(split.shares(verdict, False)) == pytest.approx(1.0)


def test_the_share_judges_the_busy_and_starved_seconds_of_its_window() -> None:
    """The roll-up names the slowdown job-wide a few steps after the nodes entered `starved`: its
    share takes the seconds of its window, as a state entered does; those before stay as counted."""
    share = split.JobShare(0.5, "waiting")
    starved = _gpu(0, "starved", "network", 0.25)
    history = NodeHistory(NODE, HistoryConfig(reports_seconds=0))
    steps = [(T0 + s, _gpu(0, "busy")) for s in range(10)] + [(T0 + 10 + s, starved) for s in range(20)]
    for t, g in steps:
        history.observe(_report(t, 1), b"", _verdict(t, (g,)), 20.0)
    for s in range(10):
        t = T0 + 30 + s
        history.observe(_report(t, 1), b"", _verdict(t, (starved,)), 20.0, {"job-1": share})
    rows = [r for r in history.take(math.inf).minutes if r.gpu == 0]
    # Held 39 s: 9 busy (entering `starved` takes them), 30 starved, the last 10 with the share;
    # the first shared verdict (T0+30) judges the 19 starved seconds before it in (T0+10, T0+30].
    assert _total(rows, "network") == pytest.approx(0.25 * (9 + 30))
    assert _total(rows, "waiting") == pytest.approx(0.25 * (19 + 10))
    assert _total(rows, "computing") == pytest.approx(39 - 0.25 * 39 - 0.25 * 29)
    assert sum(sum(r.split or ()) for r in rows) == pytest.approx(sum(r.held_seconds or 0 for r in rows))
