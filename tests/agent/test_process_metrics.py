"""The agent's process_* families are prometheus_client's ProcessCollector's, line for line."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from nodeagent.agent.process_metrics import ProcessFamilies
from nodeagent.core.metrics_text import render


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
