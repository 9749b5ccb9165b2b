"""The agent's process_* families are prometheus_client's ProcessCollector's, line for line."""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from nodeagent.agent.exposition.process import ProcessFamilies
from nodeagent.core.exposition.text import render


def _parsed(text: str) -> dict[str, tuple[str, str, float]]:
    return {
        family.name: (family.type, family.documentation, family.samples[0].value)
        for family in text_string_to_metric_families(text)
    }


def test_same_families_help_types_and_values_as_prometheus_client() -> None:
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    theirs = _parsed(generate_latest(registry).decode())
    ours = _parsed(render(ProcessFamilies().families()))
    assert ours.keys() == theirs.keys()
    for name, (kind, doc, value) in theirs.items():
        assert ours[name][:2] == (kind, doc), name
        if name in ("process_start_time_seconds", "process_max_fds"):
            assert ours[name][2] == value, name
        elif name == "process_cpu_seconds_total":
            assert 0 <= ours[name][2] - value < 1.0
        else:  # memory and descriptors move a little between the two reads
            assert abs(ours[name][2] - value) <= max(0.05 * value, 16), name


def test_no_proc_at_all_gives_no_process_families(tmp_path: Path) -> None:
    # Another OS, a sandbox without /proc: no process_* at all, as prometheus_client does.
    assert list(ProcessFamilies(procfs=tmp_path).families()) == []


def test_a_forked_child_reports_its_own_process() -> None:
    """The kept /proc/self descriptors name the process that opened them: a child opens its own."""
    families = ProcessFamilies()
    assert "process_open_fds" in _parsed(render(families.families()))
    go_read, go_write = os.pipe()
    result_read, result_write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: wait for the parent's extra descriptors, then read its own page
        try:
            os.read(go_read, 1)
            ours = _parsed(render(families.families()))["process_open_fds"][2]
            os.write(result_write, f"{ours} {len(os.listdir('/proc/self/fd'))}".encode())
        finally:
            os._exit(0)
    extra = [os.pipe() for _ in range(20)]  # the parent's table grows by 40; the child's does not
    try:
        os.write(go_write, b"x")
        reported, listed = (float(word) for word in os.read(result_read, 100).split())
        os.waitpid(child, 0)
    finally:
        for fd in (go_read, go_write, result_read, result_write, *(fd for pair in extra for fd in pair)):
            os.close(fd)
    assert abs(reported - listed) <= 2  # the child's own table (give or take the listing's)
