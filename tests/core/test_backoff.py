"""The one retry backoff: its ceiling grows and stops at the cap, jitter stays inside its bounds."""

from __future__ import annotations

import random
import statistics

import pytest

from nodeagent.core.transport.backoff import Backoff

ALMOST_ONE = 1.0 - 2**-53  # the largest value random.random() returns


def test_the_ceiling_grows_by_the_multiplier_up_to_the_cap() -> None:
    backoff = Backoff(0.5, 30.0)
    assert [backoff.ceiling(n) for n in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert [Backoff(1.0, 100.0, multiplier=3.0).ceiling(n) for n in range(6)] == [1, 3, 9, 27, 81, 100]
    assert Backoff(1.0, 100.0, multiplier=1.0).ceiling(50) == 1.0


def test_a_long_outage_stays_at_the_cap() -> None:
    # Retry counts a float cannot raise the multiplier to (2.0**1100 overflows) wait the cap.
    backoff = Backoff(0.2, 10.0, random=lambda: ALMOST_ONE)
    for retry in (1023, 1024, 1100, 10**6):
        assert backoff.ceiling(retry) == 10.0
        assert 0 <= backoff.delay(retry) < 10.0


def test_next_counts_retries_and_reset_starts_over() -> None:
    backoff = Backoff(1.0, 8.0, random=lambda: ALMOST_ONE)
    first = [backoff.next() for _ in range(6)]
    assert first == pytest.approx([1, 2, 4, 8, 8, 8])
    assert all(delay < ceiling for delay, ceiling in zip(first, [1, 2, 4, 8, 8, 8], strict=True))
    assert backoff.retries == 6
    backoff.reset()
    assert backoff.retries == 0
    assert backoff.next() == pytest.approx(1.0)


def test_the_random_source_sets_where_in_the_window_a_delay_falls() -> None:
    assert Backoff(2.0, 8.0, random=lambda: 0.0).delay(1) == 0.0
    assert Backoff(2.0, 8.0, random=lambda: 0.5).delay(1) == 2.0
    assert Backoff(2.0, 8.0, jitter="equal", random=lambda: 0.0).delay(1) == 2.0
    assert Backoff(2.0, 8.0, jitter="equal", random=lambda: 0.5).delay(1) == 3.0


def test_full_jitter_draws_as_random_uniform_did() -> None:
    # The sender and remote write drew random.uniform(0, ceiling): the same numbers from the same seed.
    ours, theirs = random.Random(7), random.Random(7)
    backoff = Backoff(0.2, 10.0, random=ours.random)
    for retry in range(12):
        assert backoff.delay(retry) == theirs.uniform(0, min(10.0, 0.2 * 2**retry))


@pytest.mark.parametrize(("jitter", "low_share"), [("full", 0.0), ("equal", 0.5)])
def test_jitter_spreads_over_its_window_and_never_leaves_it(jitter: str, low_share: float) -> None:
    source = random.Random(1234)
    backoff = Backoff(0.5, 30.0, jitter=jitter, random=source.random)  # type: ignore[arg-type]
    for retry in (0, 3, 10):
        ceiling = backoff.ceiling(retry)
        draws = [backoff.delay(retry) for _ in range(2000)]
        assert all(low_share * ceiling <= d < ceiling for d in draws)
        # Spread over the whole window, not bunched: near both ends, centred in the middle.
        width = ceiling * (1 - low_share)
        assert min(draws) < low_share * ceiling + 0.02 * width
        assert max(draws) > ceiling - 0.02 * width
        assert statistics.fmean(draws) == pytest.approx(low_share * ceiling + width / 2, rel=0.05)


@pytest.mark.parametrize(
    ("args", "kwargs", "needle"),
    [
        ((0.0, 1.0), {}, "base"),
        ((1.0, -1.0), {}, "cap"),
        ((1.0, 2.0), {"multiplier": 0.5}, "multiplier"),
        ((1.0, 2.0), {"jitter": "none"}, "jitter"),
    ],
)
def test_impossible_settings_are_refused(args: tuple[float, float], kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        Backoff(*args, **kwargs)  # type: ignore[arg-type]
