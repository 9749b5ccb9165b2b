"""``nodeagent_fix_worth_*``: one series per prediction, labelled by its subject and bottleneck;
an unknown speed-up has none; money only with a price."""

from __future__ import annotations

from nodeagent.collector.payoff.families import add_worth, worth_families
from nodeagent.collector.payoff.model import IfFixed
from nodeagent.core.exposition.text import label, render


def test_a_prediction_is_a_series_in_each_family_it_fills() -> None:
    families = worth_families()
    add_worth(families, label("node", "rental-10g-pcie"), IfFixed(1.5, "network", "50G", 1.72, 64.0, 70.4, "USD"))
    add_worth(families, label("job_name", "torch/clip"), IfFixed(2.0, "throttled", gpu_hours_per_day=96.0))
    add_worth(families, label("node", "blind"), IfFixed(None, "network", notes=("unknown: no GPM",)))
    text = render(list(families.values()))
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == [
        'nodeagent_fix_worth_speedup{node="rental-10g-pcie",bottleneck="network"} 1.5',
        'nodeagent_fix_worth_speedup{job_name="torch/clip",bottleneck="throttled"} 2.0',
        'nodeagent_fix_worth_target_speedup{node="rental-10g-pcie",bottleneck="network",target="50G"} 1.72',
        'nodeagent_fix_worth_gpu_seconds_per_second{node="rental-10g-pcie",bottleneck="network"} 2.6666666666666665',
        'nodeagent_fix_worth_gpu_seconds_per_second{job_name="torch/clip",bottleneck="throttled"} 4.0',
        'nodeagent_fix_worth_money_per_day{node="rental-10g-pcie",bottleneck="network",currency="USD"} 70.4',
    ]
