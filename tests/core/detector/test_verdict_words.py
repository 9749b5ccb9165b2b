"""A verdict in words: one unit per quantity (a disk's MB/s, a link's Gb/s), in the sentence the
fleet page and `top` show and in the NEEDS column of `nodes`; the forming window said as top says it."""

from __future__ import annotations

import re
from typing import Any

from nodeagent.collector.views.fleet_table import render_fleet
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.detector.verdict_words import forming_words, verdict_sentence
from nodeagent.tools.simulator import Simulation


def _starved(scenario: str, seconds: int = 240) -> dict[str, Any]:
    detector = NodeDetector("n", DetectorConfig())
    sim = Simulation(scenario, node_id="n", seed=1)
    for tick in range(seconds):
        report = sim.step(0.0 if tick == 0 else 1.0)
        if tick == 0:
            report.info.CopyFrom(sim.info())
        detector.observe(report)
    plain = detector.verdict.to_plain()
    assert plain["state"] == "starved", plain["state"]
    return plain


def _rates(text: str) -> set[str]:
    return set(re.findall(r"[0-9.]+ ([MG][Bb]/s)", text))


def test_a_storage_verdict_speaks_of_the_disk_and_the_ingest_it_needs_in_mb_per_second() -> None:
    verdict = _starved("storage-bound")
    assert verdict["cause"] == "storage"
    sentence = verdict_sentence(verdict)
    assert re.search(r"reads [0-9]+ MB/s", sentence) and re.search(r"needs [0-9]+ MB/s", sentence), sentence
    assert _rates(sentence) == {"MB/s"}, sentence


def test_a_network_verdict_speaks_in_gb_per_second_throughout() -> None:
    sentence = verdict_sentence(_starved("ordinary-cloud"))
    assert "receives" in sentence and "needs" in sentence, sentence
    assert _rates(sentence) == {"Gb/s"}, sentence


def test_the_needs_column_of_nodes_is_in_the_causes_unit() -> None:
    base: dict[str, Any] = {
        "connected": True, "gpu_count": 8, "state": "starved", "starvation_ratio": 0.34, "gpu_hours_lost_today": 1.0,
        "reports_total": 3, "last_seen": 0.0,
    }  # fmt: skip
    rows = [
        {**base, "node_id": "disk", "cause": "storage", "needed_ingest_bytes_per_second": 2.125e9},
        {**base, "node_id": "link", "cause": "network", "needed_ingest_bytes_per_second": 1.8e9},
    ]
    lines = {line.split()[0]: line for line in render_fleet(rows).splitlines()[1:]}
    assert "2125 MB/s" in lines["disk"] and "Gb/s" not in lines["disk"]
    assert "14.4 Gb/s" in lines["link"]


def test_forming_words_are_tops_and_vanish_once_the_window_is_full() -> None:
    assert forming_words(34.2, 60.0) == "verdict still forming: window 34 of 60 s"
    assert forming_words(60.0, 60.0) == ""
