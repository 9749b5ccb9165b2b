"""One GPU of eight failing (slow, hanging, lost) against the fake NVML: the others are read every tick."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from nodeagent.agent.config import AgentConfig, GpuDeadlines
from nodeagent.agent.kernel.files import KernelFiles
from nodeagent.agent.sources import Roots, SourceContext
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import a100_sxm4

# Generous against a loaded machine: a healthy call takes microseconds here.
DEADLINES = GpuDeadlines(call_seconds=0.5, tick_seconds=1.0, scan_seconds=2.0, backoff_max_seconds=2.0)
FAILING = 3


@pytest.fixture
def source(fake_nvml: FakeNvml) -> Iterator[GpuSource]:
    fake_nvml.load(a100_sxm4())
    ctx = SourceContext(roots=Roots(), files=KernelFiles(), config=AgentConfig(gpu_deadlines=DEADLINES))
    made = GpuSource(ctx)
    yield made
    # Release any call still blocked in the fake before NVML shuts down.
    assert fake_nvml.state is not None
    for gpu in fake_nvml.state.gpus:
        gpu.hang, gpu.delay_ms = 0, 0
    fake_nvml.write()
    made.close()
    ctx.files.close()


def scan(source: GpuSource) -> pb.NodeInfo:
    info = pb.NodeInfo()
    source.scan(info)
    return info


def tick(source: GpuSource) -> pb.NodeReport:
    report = pb.NodeReport(time_unix_seconds=time.time())
    if source.needs_rescan:
        scan(source)
        source.needs_rescan = False
    source.collect(report)
    return report


def fail(fake: FakeNvml, **how: int) -> None:
    assert fake.state is not None
    for key, value in how.items():
        setattr(fake.state.gpus[FAILING], key, value)
    fake.write()


def until(source: GpuSource, done: Callable[[pb.NodeReport], bool], limit: float = 30.0) -> list[pb.NodeReport]:
    """Tick until a report satisfies ``done``; every report on the way."""
    reports: list[pb.NodeReport] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        reports.append(tick(source))
        if done(reports[-1]):
            return reports
        time.sleep(0.05)
    raise AssertionError(f"not within {limit} s: last report {reports[-1] if reports else None}")


def gpu_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("nvml-gpu"))


def answering(report: pb.NodeReport) -> list[int]:
    return [g.index for g in report.gpus if not g.unresponsive and not g.lost and g.HasField("memory_used_bytes")]


def test_a_slow_gpu_is_unresponsive_with_its_call_and_the_others_are_read(
    fake_nvml: FakeNvml, source: GpuSource
) -> None:
    scan(source)
    tick(source)
    fail(fake_nvml, delay_ms=3000)
    report = tick(source)
    gpus = {g.index: g for g in report.gpus}
    assert len(gpus) == 8
    assert gpus[FAILING].unresponsive and not gpus[FAILING].lost
    assert gpus[FAILING].unresponsive_call.startswith("nvml")
    assert not gpus[FAILING].HasField("memory_used_bytes")  # no readings from a GPU that did not answer
    assert answering(report) == [i for i in range(8) if i != FAILING]
    events = [e for e in report.events if e.kind == "gpu_unresponsive"]
    assert [e.subject for e in events] == [f"gpu:{FAILING}"]
    assert gpus[FAILING].unresponsive_call in events[0].message
    # Completeness: the failing GPU missed one of two ticks; the others took both.
    assert (gpus[FAILING].samples_taken_total, gpus[FAILING].samples_expected_total) == (1, 2)
    assert (gpus[0].samples_taken_total, gpus[0].samples_expected_total) == (2, 2)
    # Later ticks say it again without a new event; the others keep answering.
    later = tick(source)
    assert {g.index for g in later.gpus if g.unresponsive} == {FAILING}
    assert not [e for e in later.events if e.kind == "gpu_unresponsive"]
    assert answering(later) == [i for i in range(8) if i != FAILING]


def test_a_hanging_gpu_leaves_one_blocked_call_and_one_thread_then_comes_back(
    fake_nvml: FakeNvml, source: GpuSource
) -> None:
    scan(source)
    tick(source)
    threads = gpu_threads()  # this source's eight, and any a closed one left blocked
    fail(fake_nvml, hang=1)
    first = tick(source)
    assert {g.index for g in first.gpus if g.unresponsive} == {FAILING}
    calls = fake_nvml.calls(gpu=FAILING)
    # Ticks past several backoffs: no new call reaches the hanging GPU, no thread is added.
    reports = [tick(source) for _ in range(5)]
    time.sleep(DEADLINES.backoff_max_seconds)
    reports += [tick(source) for _ in range(3)]
    assert all({g.index for g in r.gpus if g.unresponsive} == {FAILING} for r in reports)
    assert all(answering(r) == [i for i in range(8) if i != FAILING] for r in reports)
    assert fake_nvml.calls(gpu=FAILING) == calls
    assert gpu_threads() <= threads
    # Released: a probe finds it answering, an event says so, and its readings return.
    fail(fake_nvml, hang=0)
    back = until(source, lambda r: FAILING in answering(r))
    ended = [e for r in back for e in r.events if e.kind == "gpu_responsive"]
    assert [e.subject for e in ended] == [f"gpu:{FAILING}"]


def test_a_gpu_lost_after_n_calls_is_lost_not_unresponsive(fake_nvml: FakeNvml, source: GpuSource) -> None:
    scan(source)
    tick(source)
    fail(fake_nvml, lost_after=fake_nvml.calls(gpu=FAILING) + 5)
    reports = until(source, lambda r: any(g.lost for g in r.gpus))
    last = {g.index: g for g in reports[-1].gpus}
    assert last[FAILING].lost and not last[FAILING].unresponsive
    assert answering(reports[-1]) == [i for i in range(8) if i != FAILING]
    assert [e.subject for r in reports for e in r.events if e.kind == "gpu_lost"] == [f"gpu:{FAILING}"]


def test_a_gpu_that_hangs_at_the_scan_is_reported_and_opened_once_it_answers(
    fake_nvml: FakeNvml, source: GpuSource
) -> None:
    fail(fake_nvml, hang=1)
    info = scan(source)
    assert [g.index for g in info.gpu.gpus if g.uuid] == [i for i in range(8) if i != FAILING]
    report = tick(source)
    assert {g.index for g in report.gpus if g.unresponsive} == {FAILING}
    assert answering(report) == [i for i in range(8) if i != FAILING]
    fail(fake_nvml, hang=0)
    until(source, lambda r: FAILING in answering(r))


def test_a_thread_given_the_id_of_an_abandoned_one_that_ended_may_call_nvml(
    fake_nvml: FakeNvml, source: GpuSource
) -> None:
    """Thread ids are reused once a thread ends: a new thread (the event watcher's, a rescan's
    readers) must not inherit an overrun reader's abandonment, or its calls all return nothing."""
    from nodeagent.agent.gpu import nvml_library

    scan(source)  # NVML running
    abandoned_id: list[int] = []
    allowed: list[bool] = []
    release = threading.Event()

    def abandoned() -> None:
        abandoned_id.append(threading.get_ident())
        release.wait(5)
        allowed.append(nvml_library.enter_call("nvmlDeviceGetCount_v2"))

    first = threading.Thread(target=abandoned)
    first.start()
    while not abandoned_id:
        time.sleep(0.001)
    nvml_library.abandon(abandoned_id[0])
    release.set()
    first.join()
    assert allowed == [False]  # abandoned while it lived

    def later() -> None:
        if threading.get_ident() == abandoned_id[0]:
            allowed.append(nvml_library.enter_call("nvmlDeviceGetCount_v2"))
            nvml_library.leave_call()

    for _ in range(50):  # glibc hands an ended thread's stack, so its id, to the next one started
        t = threading.Thread(target=later)
        t.start()
        t.join()
        if len(allowed) > 1:
            break
    else:
        pytest.skip("no thread was given the ended thread's id in 50 starts")
    assert allowed == [False, True]
