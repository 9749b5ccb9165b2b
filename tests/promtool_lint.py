"""What ``promtool check metrics`` may say about the agent's page: only the naming lints that the
exporters it stands in for draw on their own pages.

dcgm-exporter's counters have no ``_total`` (``DCGM_FI_DEV_PCIE_REPLAY_COUNTER``) and its labels are
camelCase (``modelName``, ``Hostname``); node_exporter's meminfo families keep the kernel's field
names (``node_memory_MemFree_bytes``). Dashboards depend on those names, so they stay.
"""

from __future__ import annotations

import re
import subprocess

from nodeagent.core.exposition.dcgm import GPU_FAMILIES, XID_FAMILY


def exporter_lints(text: str) -> set[str]:
    counters = {name for name, kind, *_ in GPU_FAMILIES if kind == "counter"}
    allowed = {f'{n} counter metrics should have "_total" suffix' for n in counters}
    allowed |= {f"{n} metric name should not include type 'counter'" for n in counters}
    # Families that carry dcgm-exporter's labels (nodeagent's per-GPU ones do, to join).
    labelled = {name for name, *_ in GPU_FAMILIES} | {XID_FAMILY}
    labelled |= set(re.findall(r"^# TYPE (nodeagent_gpu_\w+) ", text, re.MULTILINE))
    allowed |= {f"{n} label names should be written in 'snake_case' not 'camelCase'" for n in labelled}
    meminfo = set(re.findall(r"^# TYPE (node_memory_\w+) ", text, re.MULTILINE))
    allowed |= {f"{n} metric names should be written in 'snake_case' not 'camelCase'" for n in meminfo}
    return allowed


def promtool_problems(text: str) -> set[str]:
    """Every line promtool prints about ``text`` that is not one of the exporters' own lints."""
    done = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    lines = {line for line in (done.stdout + done.stderr).splitlines() if line.strip()}
    return lines - exporter_lints(text)
