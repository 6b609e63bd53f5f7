"""A link fitted at its bound (0 s at a regime's least size) is no negative time."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.costmodel.network import Link, Regime


@settings(max_examples=200, deadline=None)
@given(low=st.floats(1e3, 1e8), seconds_per_mb=st.floats(1e-5, 10.0))
def test_a_regime_fitted_to_zero_time_at_its_least_size_is_a_link(
    low: float, seconds_per_mb: float
) -> None:
    """As ``_fit_regime`` writes a fit at its lower bound: the time at ``low`` is 0, which
    rounding made -1e-20 s or so (a tune across hosts failed with a traceback on it)."""
    latency = 0.0 * 1e-3 - low * seconds_per_mb * 1e-6
    link = Link((Regime(low, 1e-4, 1e9), Regime(math.inf, latency, 1e6 / seconds_per_mb)))
    assert link.seconds(int(low) + 1) >= 0


def test_a_regime_truly_below_zero_is_still_refused() -> None:
    with pytest.raises(ValueError, match="latency must be >= 0"):
        Link((Regime(1e5, 1e-4, 1e9), Regime(math.inf, -1e-3, 1e9)))
