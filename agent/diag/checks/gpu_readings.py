"""Readings that cannot be true: a field that reads 0 while the rest of the GPU says it cannot
(SM activity 0 on a busy GPU, 0 W on a busy GPU, NVLink counters flat while the job's other GPUs
move data), in both of diag's samples, or that the running agent has held suspect for minutes
(``GpuSample.suspect_fields``). It warns: the hardware may be fine, but dashboards and the
detector would be told a busy GPU idles. The rules are ``agent/gpu/suspect_fields.py``'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeagent.agent.diag.model import CheckResult, plural, summarize, warned
from nodeagent.agent.diag.observe import Observation
from nodeagent.agent.gpu.suspect_fields import contradictions, nvlink_bytes
from nodeagent.v1 import nodeagent_pb2 as pb

_HINT = (
    "the field reads what the GPU cannot be doing: a profiling or counter path is stuck (driver, DCGM "
    "profiling module, another profiler holding the counters); restart the reader or reset the GPU, and do "
    "not judge the GPU by this field meanwhile"
)


def check(gpus: Sequence[pb.GpuSample], observation: Observation) -> list[CheckResult]:
    moved = {g.index for g in gpus if (nvlink_bytes(observation.first_gpu(g.index), g) or 0) > 0}
    problems = []
    for g in gpus:
        before = observation.first_gpu(g.index)
        peers_moved = any(i != g.index for i in moved)
        now = contradictions(before, g, peers_moved)
        earlier = contradictions(None, before, False) if before is not None else {}
        # In both samples where the first has the field (GPM's first sample has no SM activity).
        said = {
            f: r for f, r in now.items()
            if f == "nvlink_bytes" or f in earlier or before is None or not before.HasField(f)
        }  # fmt: skip
        for field in g.suspect_fields:
            said.setdefault(field, "held suspect by the agent")
        for field, reason in sorted(said.items()):
            problems.append(warned("gpu.readings", f"gpu:{g.index}", f"{field}: {reason}", "plausible", _HINT))
    return summarize("gpu.readings", plural(len(gpus), "GPU"), problems, "no reading contradicts the others")
