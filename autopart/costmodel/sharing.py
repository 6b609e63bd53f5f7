"""What hosts on the driver's machine lose when they all stream at once.

Hosts of ``--cluster local:N`` (and any host on the machine the command runs on) share
that machine's cores with the driver, which sends every input and takes every output, and
with Ray's own processes. One such host streaming alone leaves them a core; when every one
of them streams, they take a share of the hosts' cores, and a host taking ``t`` seconds of
its core for an input alone gets through fewer inputs. Measured on two machines, replicas
of a 2.2 ms model on two one-core hosts ran at 1.60x one host, of a 13 ms one at 1.77x,
and of a 55 ms one at 1.75-1.80x, where the profiles predicted 2x: a fixed share of the
cores lost to the others, and a cost per input on top.

:class:`Sharing` models it as the **efficiency** of each host while all stream,
``share * t / (t + overhead_s)``: ``share`` the part of its core left to it, ``overhead_s``
what each input costs it besides its own ``t``. It is fitted (:func:`fit_sharing`) to
the efficiency measured at two per-input times, each the rate of every shared host
streaming at once over the sum of their rates streaming alone
(:mod:`autopart.runtime.host_sharing`), and saved with the network model.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import lsq_linear

MAX_OVERHEAD_S = 1.0  # an input costing a host more than this besides its own work: a bad fit
MIN_SHARE = 0.05


@dataclass(frozen=True)
class Sharing:
    """The hosts that share the driver's machine, and what each loses while all stream.

    ``measured`` holds the (seconds an input alone, efficiency) points the fit is of.
    Values out of range are a ValueError.
    """

    hosts: tuple[str, ...]
    share: float
    overhead_s: float
    measured: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        if len(self.hosts) < 2 or len(set(self.hosts)) != len(self.hosts):
            raise ValueError(f"sharing needs two distinct hosts or more, not {self.hosts}")
        if not (MIN_SHARE <= self.share <= 1.0 and 0.0 <= self.overhead_s <= MAX_OVERHEAD_S):
            raise ValueError(
                f"sharing of {self.share} of a core and {self.overhead_s} s an input is "
                "out of range"
            )
        for seconds, efficiency in self.measured:
            if not (math.isfinite(seconds) and seconds > 0 and 0 < efficiency <= 2):
                raise ValueError(f"a sharing point ({seconds}, {efficiency}) is out of range")

    def applies(self, busy: Collection[str]) -> bool:
        """Whether a plan keeping ``busy`` hosts at work has every shared host at work."""
        return set(self.hosts) <= set(busy)

    def describe(self) -> str:
        """One line: which hosts share the machine, and what each keeps streaming with all."""
        return (
            f"{', '.join(self.hosts)} share this machine: while all of them stream, each is "
            f"priced at {self.share:.0%} of its core and {self.overhead_s * 1e3:.2f} ms more an "
            "input (measured streaming alone and together)"
        )

    def efficiency(self, seconds: float) -> float:
        """The share of its rate alone a host keeps while all stream, ``seconds`` an input."""
        if seconds <= 0 or math.isinf(seconds):
            return self.share
        return self.share * (seconds / (seconds + self.overhead_s))


def fit_sharing(hosts: Sequence[str], points: Sequence[tuple[float, float]]) -> Sharing:
    """The :class:`Sharing` of ``hosts`` that best fits ``points`` (seconds, efficiency).

    ``1 / efficiency`` is linear in ``1 / seconds`` (``1 / share`` plus ``overhead_s /
    share`` times it): a bounded linear least-squares fit there, exact through two points,
    with ``share`` within [:data:`MIN_SHARE`, 1] and ``overhead_s`` within [0,
    :data:`MAX_OVERHEAD_S`]. One point fits the share alone. Efficiencies above 1 (noise,
    where nothing is lost) count as 1. No points is a ValueError.
    """
    if not points:
        raise ValueError("sharing is fitted to one point or more")
    seconds = np.array([s for s, _ in points], dtype=float)
    seen = np.clip(np.array([e for _, e in points], dtype=float), 1e-3, 1.0)
    measured = tuple((float(s), float(e)) for s, e in points)
    if len(points) == 1:
        return Sharing(tuple(hosts), max(float(seen[0]), MIN_SHARE), 0.0, measured)
    slopes = np.column_stack([np.ones_like(seconds), 1.0 / seconds])
    upper = [1.0 / MIN_SHARE, MAX_OVERHEAD_S / MIN_SHARE]
    inverse, per_second = lsq_linear(slopes, 1.0 / seen, bounds=([1.0, 0.0], upper)).x
    share = 1.0 / float(inverse)
    overhead = min(float(per_second) * share, MAX_OVERHEAD_S)
    return Sharing(tuple(hosts), min(max(share, MIN_SHARE), 1.0), overhead, measured)
