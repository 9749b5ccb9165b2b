"""The round (``agent/gpu/round_readings.py``): one reading a tick in turn, and the throttling
clock-event reasons from their duration counters every tick."""

from __future__ import annotations

import time
from collections.abc import Callable

from nodeagent.agent.gpu.fields import CLOCK_EVENT_DURATIONS
from nodeagent.agent.gpu.round_readings import EVERYTHING, LONGEST_ROUND, RoundReadings
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import a100_sxm4, h100_sxm5

SW_POWER_CAP, HW_SLOWDOWN, SW_THERMAL, HW_THERMAL = 0x4, 0x8, 0x20, 0x40


def _durations(**grown: int) -> dict[tuple[int, int], int]:
    """Counter values by field: 1000 ns each, plus what ``grown`` adds by bit name."""
    bits = {"power": 0x4, "sync": 0x10, "sw_thermal": 0x20, "hw_thermal": 0x40, "brake": 0x80}
    return {
        (field, 0): 1000 + sum(ns for name, ns in grown.items() if bits[name] == bit)
        for field, bit in CLOCK_EVENT_DURATIONS
    }


def test_a_reason_is_set_when_its_time_grew_and_hw_slowdown_with_a_hw_cause() -> None:
    turn = RoundReadings()
    assert turn.counted_reasons(_durations()) is None  # the first reading: nothing to compare
    assert turn.counted_reasons(_durations()) == 0
    assert turn.counted_reasons(_durations(power=5)) == SW_POWER_CAP
    assert turn.counted_reasons(_durations(power=5, sw_thermal=9)) == SW_THERMAL
    assert turn.counted_reasons(_durations(power=5, sw_thermal=9, hw_thermal=1)) == HW_THERMAL | HW_SLOWDOWN
    assert turn.counted_reasons(_durations()) == 0  # went back (a driver reload): says nothing
    missing = _durations()
    del missing[(CLOCK_EVENT_DURATIONS[-1][0], 0)]
    assert turn.counted_reasons(missing) is None  # a driver without the field: the bitmask instead
    assert turn.counted_reasons(_durations()) is None


def test_each_reading_of_the_round_comes_within_a_round_and_a_scan_reads_everything() -> None:
    turn = RoundReadings()
    assert turn.turn(gpm=True, counted=True, shares=True) == EVERYTHING
    seen = [turn.turn(gpm=True, counted=True, shares=True) for _ in range(LONGEST_ROUND)]
    assert sorted(seen) == ["memory", "processes", "reasons", "shares", "utilization"]
    seen = {turn.turn(gpm=False, counted=False, shares=False) for _ in range(2)}
    assert seen == {"memory", "processes"}  # no GPM: utilization every tick; no counters: the bitmask too
    turn.make_fresh()
    assert turn.turn(gpm=False, counted=True, shares=False) == EVERYTHING
    assert turn.reads("memory") and turn.reads("shares")


def test_a_reading_that_failed_is_read_again_at_the_next_tick() -> None:
    """A GPU that stopped answering mid-round must not go a whole round without its processes
    (the power read between reports follows them)."""
    turn = RoundReadings()
    turn.turn(gpm=False, counted=True, shares=False)
    first = turn.turn(gpm=False, counted=True, shares=False)
    turn.retry = first  # its read failed
    assert turn.turn(gpm=False, counted=True, shares=False) == first
    assert turn.turn(gpm=False, counted=True, shares=False) != first  # then the round goes on


def test_a_throttle_that_ended_before_the_tick_is_still_reported(
    fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource]
) -> None:
    """The bitmask is a glance at one instant; the counters say what held the clocks during the tick."""
    state = fake_nvml.load(a100_sxm4(count=2))
    source = make_gpu_source()
    source.scan(pb.NodeInfo())
    source.collect(pb.NodeReport(time_unix_seconds=1000.0))
    source.collect(pb.NodeReport(time_unix_seconds=1001.0))
    state.gpus[1].clock_reasons = SW_THERMAL
    fake_nvml.write()
    source.collect(pb.NodeReport(time_unix_seconds=1002.0))  # the fake takes the throttle from here
    time.sleep(0.05)
    state.gpus[1].clock_reasons = 0  # and it ends before the next tick's reads
    fake_nvml.write()
    report = pb.NodeReport(time_unix_seconds=1003.0)
    source.collect(report)
    assert list(report.gpus[1].clock_event_reason_names) == ["sw_thermal_slowdown"]
    assert not report.gpus[0].clock_event_reason_names
    later = pb.NodeReport(time_unix_seconds=1004.0)
    source.collect(later)
    assert not later.gpus[1].clock_event_reason_names  # its time stopped growing


def test_the_bitmask_gives_the_reasons_without_a_counter_within_a_round(
    fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource]
) -> None:
    state = fake_nvml.load(h100_sxm5(count=1))
    source = make_gpu_source()
    source.scan(pb.NodeInfo())
    source.collect(pb.NodeReport(time_unix_seconds=1000.0))
    state.gpus[0].clock_reasons = 0x1 | SW_POWER_CAP  # idle (no counter) and the power cap (counted)
    fake_nvml.write()
    names: list[list[str]] = []
    for t in range(LONGEST_ROUND):
        report = pb.NodeReport(time_unix_seconds=1001.0 + t)
        source.collect(report)
        names.append(list(report.gpus[0].clock_event_reason_names))
    assert all("sw_power_cap" in n for n in names)  # every tick, from its counter
    assert names[-1] == ["gpu_idle", "sw_power_cap"]  # idle from the round's bitmask, then carried
    assert names[0] == ["sw_power_cap"] or names[0] == names[-1]
