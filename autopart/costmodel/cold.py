"""Cold entry: what entering a target costs after its lane sat idle while other work ran.

The profile measures a subgraph entered after the host worked elsewhere for
``COLD_ENTRY.gap_s`` (:mod:`autopart.costmodel.cuts` turns that into a per-target price);
:func:`cold_share` scales that price by how long the target really sat idle in a schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autopart.settings import tuned


@dataclass(frozen=True)
class ColdEntrySettings:
    """How the cost model prices entering a target whose lane sat idle (costmodel.cold)."""

    gap_s: float = tuned(
        5e-3,
        "the idle time before a cold entry is measured: a few ms of host work elsewhere, "
        "as while another partition runs (profile 'cold' rows)",
    )
    ramp_s: float = tuned(
        5e-3,
        "time constant of a target going cold: fitted by experiments/exp_cold_entry.py "
        "(penalty against idle gap, results/cold_entry_fit.csv)",
    )


COLD_ENTRY = ColdEntrySettings()


def cold_share(idle_s: float | None, ramp_s: float = COLD_ENTRY.ramp_s) -> float:
    """The share of a target's cold entry due after it sat idle for ``idle_s`` seconds.

    The profile measures the entry after ``COLD_ENTRY.gap_s`` of idling; the penalty grows
    as ``1 - exp(-idle / ramp_s)``, so that gap pays 1 and shorter ones less. Longer idling
    pays no more than 1 (the profile measured none longer), nor does a target's first
    partition of a run (``None``: it sat idle since the run before). ``ramp_s <= 0`` pays
    every entry whole (the cost model before idle times were counted).
    """
    if idle_s is None or ramp_s <= 0:
        return 1.0
    ramp = -math.expm1(-max(idle_s, 0.0) / ramp_s)
    return min(ramp / -math.expm1(-COLD_ENTRY.gap_s / ramp_s), 1.0)
