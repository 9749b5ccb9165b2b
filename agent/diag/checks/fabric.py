"""The NVLink fabric (NVSwitch systems: HGX H100/B200, GB200/GB300 NVL72): is every GPU registered
with the fabric manager, healthy, and in the clique and cluster the node was rented in?

The per-link NVLink checks can pass while the fabric does not: a GPU whose registration never
completed, or whose routes are unhealthy, reaches its peers slowly or not at all. Not registered,
registration failed, unhealthy, degraded bandwidth or a wrong configuration FAIL, naming the GPU;
a recovery under way warns. A node whose GPUs are not fabric-attached skips, unless its profile
says the fabric is required (``[fabric] required``), or expects a clique (``clique_gpus``: how many
of the node's GPUs must share one clique) or a cluster (``cluster_uuid``). What the parts mean is
``core/wire/fabric.py``'s, as the collector's alert reads them.
"""

from __future__ import annotations

from collections import Counter

from nodeagent.agent.diag.checks.context import DiagContext
from nodeagent.agent.diag.model import CheckResult, failed, plural, skipped, summarize, warned
from nodeagent.core.wire.fabric import describe, fabric_problems, fabric_transients
from nodeagent.v1 import nodeagent_pb2 as pb

CHECKS = ("fabric.state", "fabric.health", "fabric.clique")
_STATE_HINT = (
    "the GPU is not in the NVLink fabric: check the fabric manager (`systemctl status nvidia-fabricmanager`, "
    "or the NVL72 rack's NVSwitch trays and NMX), then reset the GPU; drain the node meanwhile"
)
_HEALTH_HINT = (
    "the fabric reports this GPU unhealthy or degraded: collectives over NVLink slow down or fail; "
    "drain the node and have the rack's NVLink fabric (NVSwitch trays, cables) checked"
)


def run(ctx: DiagContext) -> list[CheckResult]:
    info = {g.index: g for g in ctx.observation.info.gpu.gpus}
    gpus = [g for g in ctx.observation.last.gpus if not g.lost and g.index in info]
    if ctx.observation.info.gpu.unavailable_reason or not gpus:
        return []  # the GPU area already said why
    expect = ctx.profile.fabric
    group = plural(len(gpus), "GPU")
    attached = [g for g in gpus if g.HasField("fabric")]
    wanted = expect.required or expect.clique_gpus is not None or expect.cluster_uuid is not None
    if not attached:
        if wanted:
            hint = (
                "the profile expects an NVLink fabric and no GPU reports one: a board without NVSwitches, or the driver"
            )
            return [failed("fabric.state", group, "not fabric-attached", "registered", hint)]
        return [skipped(check, group, "the GPUs are not fabric-attached (no NVSwitch fabric)") for check in CHECKS]
    return [*_state(gpus), *_health(attached), *_clique(attached, expect.clique_gpus, expect.cluster_uuid)]


def _state(gpus: list[pb.GpuSample]) -> list[CheckResult]:
    problems = []
    for g in gpus:
        if not g.HasField("fabric"):
            hint = "the other GPUs are in the fabric and this one reports none: reset it; drain for repair if it stays"
            problems.append(failed("fabric.state", f"gpu:{g.index}", "not fabric-attached", "registered", hint))
            continue
        found = [p for p in fabric_problems(g.fabric) if p in ("not_registered", "registration_failed")]
        if found:
            problems.append(failed("fabric.state", f"gpu:{g.index}", describe(g.fabric), "completed", _STATE_HINT))
    return summarize(
        "fabric.state", plural(len(gpus), "GPU"), problems, "registered with the fabric manager", "completed"
    )


def _health(gpus: list[pb.GpuSample]) -> list[CheckResult]:
    problems = []
    for g in gpus:
        found = [p for p in fabric_problems(g.fabric) if p not in ("not_registered", "registration_failed")]
        subject = f"gpu:{g.index}"
        if found:
            problems.append(failed("fabric.health", subject, describe(g.fabric), "healthy", _HEALTH_HINT))
        elif fabric_transients(g.fabric):
            hint = "the fabric manager is recovering a route for this GPU: run diag again in a minute"
            value = ", ".join(fabric_transients(g.fabric)) + " under way"
            problems.append(warned("fabric.health", subject, value, "healthy", hint))
    return summarize("fabric.health", plural(len(gpus), "GPU"), problems, "healthy, full bandwidth", "healthy")


def _clique(gpus: list[pb.GpuSample], clique_gpus: int | None, cluster: str | None) -> list[CheckResult]:
    group = plural(len(gpus), "GPU")
    registered = [g for g in gpus if g.fabric.state == "completed"]
    if not registered:
        return [skipped("fabric.clique", group, "no GPU registered: no clique yet")]
    cliques = Counter((g.fabric.cluster_uuid, g.fabric.clique_id) for g in registered)
    (main_cluster, main_clique), together = cliques.most_common(1)[0]
    problems = []
    for g in registered:
        subject = f"gpu:{g.index}"
        if cluster is not None and g.fabric.cluster_uuid != cluster:
            hint = "the GPU is in another NVLink domain than rented: check the rack the node was placed in"
            problems.append(failed("fabric.clique", subject, g.fabric.cluster_uuid or "no cluster", cluster, hint))
        elif (g.fabric.cluster_uuid, g.fabric.clique_id) != (main_cluster, main_clique):
            hint = "the GPU is in another clique than the node's other GPUs: NVLink cannot reach them; reset or drain"
            value, want = f"clique {g.fabric.clique_id}", f"clique {main_clique} like the others"
            problems.append(failed("fabric.clique", subject, value, want, hint))
    if clique_gpus is not None and together < clique_gpus and not problems:
        hint = "fewer of the node's GPUs share a clique than rented: check the fabric manager's partition"
        problems.append(
            failed("fabric.clique", group, f"{together} in clique {main_clique}", f"{clique_gpus} in one clique", hint)
        )
    where = f"clique {main_clique}" + (f" of cluster {main_cluster}" if main_cluster else "")
    expected = " and ".join(
        x for x in (f"{clique_gpus} in one clique" if clique_gpus is not None else "", cluster or "") if x
    )
    return summarize("fabric.clique", group, problems, f"{together} in {where}", expected)
