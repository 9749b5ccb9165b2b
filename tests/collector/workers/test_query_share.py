"""The store-query slots with a front: its unix-socket calls may use a worker's whole cap (the
front keeps each operator to their own share), any other caller its share."""

from __future__ import annotations

import pytest

from nodeagent.collector.query.bounds import InFlight, QueryBounds
from nodeagent.core.transport.refused import QueryRefusedError


def test_the_front_uses_the_whole_cap_an_operator_only_their_share() -> None:
    slots = InFlight(QueryBounds(max_per_caller=2))
    slots.take("ipv4:10.0.0.7")
    slots.take("ipv4:10.0.0.7")
    with pytest.raises(QueryRefusedError, match="--max-queries-per-caller"):
        slots.take("ipv4:10.0.0.7")
    for _ in range(slots.bounds.max_in_flight - 2):
        slots.take("unix:/run/nodeagent-collector/worker0.sock")
    with pytest.raises(QueryRefusedError, match="its limit"):
        slots.take("unix:/run/nodeagent-collector/worker0.sock")
