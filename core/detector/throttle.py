"""Step 3 of the detector's rule chain, its first cause: `throttled`.

Clock-event reasons (thermal, power, HW slowdown: the ``throttle_reasons`` of the config, bits in
``core/wire/clock_events.py``) set for enough of a window make the GPU `throttled` before any
other cause is looked at: a slowed GPU is not waiting for data. Per report the throttled time is
counted into the open step; the window counts the steps where it makes up
``throttled_share_ratio`` of the time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodeagent.core.wire.clock_events import CLOCK_EVENT_REASONS
from nodeagent.v1 import nodeagent_pb2 as pb

if TYPE_CHECKING:
    from nodeagent.core.detector.config import DetectorConfig
    from nodeagent.core.detector.step import Step
    from nodeagent.core.detector.window import Window


def throttle_mask(config: DetectorConfig) -> int:
    """The clock-event reason bits that count as throttling."""
    return sum(bit for bit, name in CLOCK_EVENT_REASONS if name in config.throttle_reasons)


def count_throttled(step: Step, g: pb.GpuSample, mask: int, dt: float) -> None:
    if g.clock_event_reasons & mask:
        step.throttled += dt


def is_throttled(w: Window, previous: str, config: DetectorConfig) -> bool:
    """Enough throttled steps to enter `throttled`, or (once in it) too many to leave it."""
    need, steps = config.enter_steps, config.window_steps
    return w.throttled >= need or (previous == "throttled" and w.throttled > steps - need)
