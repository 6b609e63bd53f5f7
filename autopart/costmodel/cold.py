"""Cold entry: what entering a target costs after its lane sat idle while other work ran.

The profile measures a subgraph entered after the host worked elsewhere for
:data:`COLD_GAP_S` (:mod:`autopart.costmodel.cuts` turns that into a per-target price);
:func:`cold_share` scales that price by how long the target really sat idle in a schedule.
"""

from __future__ import annotations

import math

from autopart.settings import COLD_ENTRY

COLD_GAP_S = COLD_ENTRY.gap_s  # how long a target idles before its cold entry is measured
COLD_RAMP_S = COLD_ENTRY.ramp_s  # the time constant of a target going cold


def cold_share(idle_s: float | None, ramp_s: float = COLD_RAMP_S) -> float:
    """The share of a target's cold entry due after it sat idle for ``idle_s`` seconds.

    The profile measures the entry after :data:`COLD_GAP_S` of idling; the penalty grows as
    ``1 - exp(-idle / ramp_s)``, so that gap pays 1 and shorter ones less. Longer idling
    pays no more than 1 (the profile measured none longer), nor does a target's first
    partition of a run (``None``: it sat idle since the run before). ``ramp_s <= 0`` pays
    every entry whole (the cost model before idle times were counted).
    """
    if idle_s is None or ramp_s <= 0:
        return 1.0
    ramp = -math.expm1(-max(idle_s, 0.0) / ramp_s)
    return min(ramp / -math.expm1(-COLD_GAP_S / ramp_s), 1.0)
