"""The job page's evidence in words with units (``views/evidence_text.py``): the keys the job
roll-up and the detector write, each said as a person reads it, and a key it does not know said
readably rather than hidden or raw."""

from __future__ import annotations

import pytest

from nodeagent.collector.views.evidence_text import evidence_lines, evidence_text


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("busy_ratio_job_median", 0.9229, "job's median busy share 92%"),
        ("network_rx_bytes_per_second", 1189022260, "network receive 1.19 GB/s"),
        ("busy_ratio", 0.5329, "busy share 53%"),
        ("busy_ratio_score", -13.16, "busy share: modified z-score -13.2"),
        ("data_wait_ratio_job_median", 0.0433, "job's median data wait share 4%"),
        ("straggler_wait_ratio", 0.3419, "wait on the straggler 34%"),
        ("network_tx_bytes_per_second", 17723600.0, "network send 17.7 MB/s"),
        ("needed_bytes_per_second_node_median", 4.2e9, "needed to keep the GPUs busy (node median) 4.2 GB/s"),
        ("sm_clock_mhz", 1410.0, "SM clock 1410 MHz"),
        ("stood_out_steps", "4/6", "steps it stood out 4/6"),
        ("nodes_compared", 3, "nodes compared 3"),
        ("nodes_waiting", 2, "nodes waiting 2"),
        ("straggler", "fig-2", "straggler fig-2"),
        ("link_nic_speed", "nic:eth1", "link (nic speed) stands out: nic:eth1"),
        ("link_nic_speed_value", 1.25e9, "link (nic speed): this node 1.25 GB/s"),
        ("link_nic_speed_job_median", 1.25e10, "link (nic speed): the job's median 12.5 GB/s"),
        ("link_nvlink_errors_value", 12.0, "link (nvlink errors): this node 12"),
        # Unknown keys: the name in words, the value as it is (a number to 3 significant digits).
        ("frobnication_level", 3.14159, "frobnication level 3.14"),
        ("some_new_ratio", 0.5, "some new 50%"),
        ("odd_word", "not a number", "odd word not a number"),
    ],
)
def test_each_evidence_key_is_said_in_words_with_its_unit(key: str, value: object, said: str) -> None:
    assert evidence_text(key, value) == said


def test_the_lines_keep_each_key_in_order_of_keys() -> None:
    lines = evidence_lines({"network_link": "eth0", "busy_ratio": 0.41})
    assert lines == [
        {"key": "busy_ratio", "text": "busy share 41%"},
        {"key": "network_link", "text": "network link eth0"},
    ]
