"""The restart policy the workers' supervisor and remote write share, and dying with the parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import psutil

from nodeagent.core.program.child_restart import RestartPolicy
from tests.fakes.fleet import wait_for
from tests.fakes.trees import REPO


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_child_that_keeps_failing_waits_longer_each_time_up_to_the_cap() -> None:
    policy = RestartPolicy(0.5, 30.0, 60.0, clock=Clock(), random=lambda: 0.999999)
    delays = [round(policy.delay(), 2) for _ in range(9)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_a_healthy_run_starts_the_delays_over_and_a_short_one_does_not() -> None:
    clock = Clock()
    policy = RestartPolicy(0.5, 30.0, 60.0, clock=clock, random=lambda: 0.999999)
    for _ in range(4):
        policy.delay()
    policy.started()
    clock.now += 5.0  # died after 5 s: still failing
    assert policy.ran_seconds() == 5.0
    assert round(policy.delay(), 2) == 8.0
    policy.started()
    clock.now += 60.0  # ran a minute: a new failure, not the same one
    assert round(policy.delay(), 2) == 0.5
    assert policy.ran_seconds() == 0.0  # not started since


def test_a_delay_is_never_under_half_its_ceiling() -> None:
    policy = RestartPolicy(0.5, 30.0, 60.0, clock=Clock(), random=lambda: 0.0)
    assert [policy.delay() for _ in range(3)] == [0.25, 0.5, 1.0]


def test_a_child_dies_with_its_parent_however_the_parent_dies() -> None:
    # The parent starts a child that asks for SIGTERM at its parent's death, then is SIGKILLed.
    child = textwrap.dedent("""
        import signal, sys, time
        from nodeagent.core.program.child_restart import die_with_parent
        assert die_with_parent(signal.SIGTERM)
        print("armed", flush=True)
        time.sleep(60)
    """)
    parent = textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", {child!r}], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "armed"
        print(child.pid, flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    child_pid = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert wait_for(lambda: not psutil.pid_exists(child_pid) or _zombie(child_pid), 10)


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
