"""The predictions as the query service answers them: a node's made from its verdict and the
node-wide values of its last window step, a job's from its verdict's (made where the job was
judged); each priced as the ledger prices (``[prices]``) and set at the ``[payoff]`` target."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from nodeagent.collector.ledger.prices import Prices
from nodeagent.collector.payoff.model import IfFixed, interconnect_rate, node_prediction, priced, with_target
from nodeagent.collector.payoff.targets import PayoffConfig
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.v1 import nodeagent_pb2 as pb

_COUNTED = frozenset({"busy", "starved", "throttled", "waiting"})


class _Held(Protocol):
    """A node as a collector process holds it: its latest topology, where known."""

    @property
    def topology(self) -> pb.NodeInfo | None: ...


def node_worth(
    verdict: NodeVerdict,
    values: Mapping[str, float | str],
    topology: pb.NodeInfo | None,
    prices: Prices,
    config: PayoffConfig,
) -> IfFixed | None:
    """A starved node's ``if_fixed``; None for any other. ``values``: the node-wide values of its
    detector's last window step (``NodeDetector.evidence.values``)."""
    if verdict.state != "starved":
        return None
    fixed = node_prediction(
        verdict.cause, verdict.starvation_ratio, verdict.interconnect_ratio, verdict.evidence, values,
        interconnect_rate(topology), verdict.needed_ingest_bytes_per_second, config,
    )  # fmt: skip
    if fixed is None:
        return None
    gpus = sum(1 for g in verdict.gpus if g.state in _COUNTED)
    model = topology.gpu.gpus[0].name if topology is not None and topology.gpu.gpus else ""
    price = prices.per_gpu_hour(verdict.node_id, model) if prices.configured else None
    return priced(fixed, gpus, price, prices.currency)


def job_worth(
    fixed: IfFixed | None,
    gpus: int,
    nodes: Mapping[str, str],
    prices: Prices,
    config: PayoffConfig,
) -> IfFixed | None:
    """A job's ``if_fixed`` (its verdict's), at the ``[payoff]`` target and priced at the mean
    price of its nodes (``nodes``: node id -> its GPU model where known, else "")."""
    if fixed is None:
        return None
    fixed = with_target(fixed, config)
    price = None
    if prices.configured and nodes:
        price = sum(prices.per_gpu_hour(node, model) for node, model in nodes.items()) / len(nodes)
    return priced(fixed, gpus, price, prices.currency)


def gpu_models(held: Mapping[str, _Held], nodes: Iterable[str]) -> dict[str, str]:
    """Each node's GPU model where this process holds its topology, else "": the price key the
    ledger uses beside the node's id."""
    out = {}
    for node_id in nodes:
        node = held.get(node_id)
        gpus = node.topology.gpu.gpus if node is not None and node.topology is not None else ()
        out[node_id] = gpus[0].name if gpus else ""
    return out
