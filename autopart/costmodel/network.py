"""The network between hosts: a transfer costs a latency plus its bytes over a bandwidth.

Each ordered pair of hosts gets a :class:`Link`, fitted (:func:`fit_link`) to transfers of
several sizes timed over the channel the executor uses. The
fit minimises relative, not absolute, residuals: a 1 KB transfer's time is mostly latency
and a 64 MB one's mostly bandwidth, and both must be predicted within the same share.

A :class:`NetworkModel` is saved as JSON beside the profiles (:func:`save_network`),
written atomically and checked when read back (:func:`load_network`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from autopart.costmodel.sharing import Sharing
from autopart.errors import ProfileError
from autopart.io import atomic_write_bytes

NETWORK_FORMAT = "autopart.network 1"


ROUNDING_S = 1e-12  # a time this far below 0 is a fit's rounding, not a negative time


@dataclass(frozen=True)
class Regime:
    """Transfers of up to ``upto_bytes`` cost ``latency_s`` plus bytes over ``bytes_per_s``.

    A regime above the first may have a negative ``latency_s``: its line starts where the
    regime below ends, and a channel whose cost per byte grows with the size (a payload
    beyond the caches, fresh pages to fault in) is steeper there. :class:`Link` checks
    that no regime predicts a negative time over its sizes.
    """

    upto_bytes: float
    latency_s: float
    bytes_per_s: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.latency_s):
            raise ValueError(f"a link's latency must be finite, not {self.latency_s}")
        if not (math.isfinite(self.bytes_per_s) and self.bytes_per_s > 0):
            raise ValueError(f"a link's bandwidth must be finite and > 0, not {self.bytes_per_s}")
        if not self.upto_bytes > 0:
            raise ValueError(f"a regime must cover some bytes, not up to {self.upto_bytes}")


@dataclass(frozen=True)
class Link:
    """One direction between two hosts: a latency plus bytes over a bandwidth, by regime.

    A channel may move small and large transfers differently (Ray passes an object of up
    to 100 KiB inline with the call, and a larger one through the object stores), so a
    link holds one :class:`Regime` per range of sizes, in increasing ``upto_bytes``, the
    last unbounded. ``measured`` holds the timings it was fitted to, as (bytes, median
    seconds, runs).
    """

    regimes: tuple[Regime, ...]
    measured: tuple[tuple[int, float, int], ...] = ()

    def __post_init__(self) -> None:
        bounds = [regime.upto_bytes for regime in self.regimes]
        if not bounds or bounds != sorted(set(bounds)) or bounds[-1] != math.inf:
            raise ValueError(f"a link's regimes must rise to an unbounded last one, not {bounds}")
        for low, regime in zip([0.0, *bounds], self.regimes, strict=False):
            # a fit at its bound (0 s at ``low``) rounds to -1e-20 s or so: not below 0
            if regime.latency_s + low / regime.bytes_per_s < -ROUNDING_S:
                raise ValueError(
                    f"a link's latency must be >= 0 at the least size its regime covers "
                    f"({low:,.0f} bytes), not {regime.latency_s}"
                )

    @classmethod
    def simple(cls, latency_s: float, bytes_per_s: float) -> Link:
        """One regime for every size."""
        return cls((Regime(math.inf, latency_s, bytes_per_s),))

    @property
    def latency_s(self) -> float:
        """The latency of the smallest transfers."""
        return self.regimes[0].latency_s

    @property
    def bytes_per_s(self) -> float:
        """The bandwidth of the largest transfers."""
        return self.regimes[-1].bytes_per_s

    def seconds(self, nbytes: int | float) -> float:
        """The predicted time to move ``nbytes`` over this link."""
        regime = next(r for r in self.regimes if nbytes <= r.upto_bytes)
        return regime.latency_s + float(nbytes) / regime.bytes_per_s

    def bytes_seconds(self, nbytes: int | float) -> float:
        """The part of :meth:`seconds` that grows with the bytes (the least latency left out)."""
        return max(self.seconds(nbytes) - self.latency_s, 0.0)

    def worst_error(self) -> float:
        """The largest relative error of the prediction on the timings it was fitted to."""
        return max((abs(self.seconds(n) / t - 1) for n, t, _ in self.measured), default=0.0)


def fit_link(
    nbytes: Sequence[int],
    seconds: Sequence[float],
    runs: Sequence[int] = (),
    splits: Sequence[int] = (),
) -> Link:
    """The :class:`Link` whose prediction is nearest, relatively, to ``seconds`` at ``nbytes``.

    ``splits`` are sizes where the channel changes how it moves bytes: each range between
    them is fitted apart, as long as it holds at least two sizes (else it joins the range
    above). Needs at least two distinct sizes and positive times; raises
    :class:`ValueError` otherwise. ``runs`` (how many timings each median is of) is kept.
    """
    sizes = np.asarray(nbytes, dtype=float)
    times = np.asarray(seconds, dtype=float)
    if len(sizes) != len(times) or len(set(sizes.tolist())) < 2:
        raise ValueError("a link is fitted to timings of at least two sizes")
    if not (np.all(np.isfinite(times)) and np.all(times > 0)):
        raise ValueError("a link is fitted to positive, finite times")
    bounds = [-math.inf, *sorted(set(splits)), math.inf]

    def distinct(low: float, high: float) -> int:
        return len(set(sizes[(sizes > low) & (sizes <= high)].tolist()))

    ranges: list[list[float]] = []
    for low, high in itertools.pairwise(bounds):
        if ranges and distinct(*ranges[-1]) < 2:
            ranges[-1][1] = high  # too few sizes below: one range with this one
        else:
            ranges.append([low, high])
    if len(ranges) > 1 and distinct(*ranges[-1]) < 2:
        last = ranges.pop()
        ranges[-1][1] = last[1]
    regimes = []
    for low, high in ranges:
        inside = (sizes > low) & (sizes <= high)
        regimes.append(_fit_regime(sizes[inside], times[inside], max(low, 0.0), high))
    counts = list(runs) or [1] * len(sizes)
    measured = tuple(
        (int(n), float(t), int(r)) for n, t, r in zip(sizes, times, counts, strict=True)
    )
    return Link(tuple(regimes), measured)


def fit_link_regimes(
    nbytes: Sequence[int], seconds: Sequence[float], runs: Sequence[int] = (), most: int = 3
) -> Link:
    """The :func:`fit_link` of at most ``most`` regimes, split where the fit is closest.

    Every way to split the measured sizes into up to ``most`` ranges of at least two sizes
    each is fitted; the link kept has the least worst relative error (the fewer regimes
    where two tie). For a channel whose cost per byte changes at sizes that depend on the
    machine (a payload beyond the caches, a socket's buffers) rather than at a size the
    channel names. Raises :class:`ValueError` as :func:`fit_link` does.
    """
    sizes = sorted(set(nbytes))
    best = fit_link(nbytes, seconds, runs)
    for count in range(1, max(most, 1)):
        for chosen in itertools.combinations(range(1, len(sizes) - 2), count):
            if any(b - a < 2 for a, b in itertools.pairwise(chosen)):
                continue  # each range keeps two sizes
            link = fit_link(nbytes, seconds, runs, [sizes[i] for i in chosen])
            if link.worst_error() < best.worst_error():
                best = link
    return best


def _fit_regime(sizes: np.ndarray, times: np.ndarray, low: float, upto: float) -> Regime:
    """The line minimising the relative residuals at ``sizes``, >= 0 from ``low`` bytes on."""
    # in units where both parameters are near 1: the time at ``low`` in ms, seconds per MB
    slope_guess = max(float(np.polyfit(sizes, times, 1)[0]), 1e-12) * 1e6
    start = [max(float(times.min()) * 1e3, 1e-6), slope_guess]

    def relative(params: np.ndarray) -> np.ndarray:
        return (params[0] * 1e-3 + params[1] * 1e-6 * (sizes - low)) / times - 1

    fit = least_squares(relative, start, bounds=([0.0, 1e-9], [np.inf, np.inf]))
    at_low_ms, seconds_per_mb = (float(x) for x in fit.x)
    return Regime(upto, at_low_ms * 1e-3 - low * seconds_per_mb * 1e-6, 1e6 / seconds_per_mb)


@dataclass
class NetworkModel:
    """Links between named hosts, by ordered pair (``a``, ``b``).

    A host's link to itself, where measured, prices a call within the host (values through
    its own object store); without one, moving within a host is free. ``hosts`` maps each
    host to its fingerprint where known. :meth:`seconds` falls back to the reverse
    direction when only that one is known. ``sharing``, where measured, is what the hosts
    on the driver's machine lose while they all stream (:mod:`autopart.costmodel.sharing`).
    """

    links: dict[tuple[str, str], Link] = field(default_factory=dict)
    hosts: dict[str, str] = field(default_factory=dict)
    sharing: Sharing | None = None

    def link(self, a: str, b: str) -> Link | None:
        """The link from ``a`` to ``b`` (or from ``b`` to ``a``), or ``None``."""
        return self.links.get((a, b)) or self.links.get((b, a))

    def seconds(self, a: str, b: str, nbytes: int | float) -> float:
        """The predicted time to move ``nbytes`` from host ``a`` to host ``b``.

        Zero on one host without a link to itself; :class:`ProfileError` when the model
        has no link between two hosts.
        """
        if a == b and (a, a) not in self.links:
            return 0.0
        link = self.link(a, b)
        if link is None:
            raise ProfileError(f"the network model has no link between {a} and {b}")
        return link.seconds(nbytes)

    def merged(self, other: NetworkModel) -> NetworkModel:
        """A model of these links with ``other``'s (and hosts) added, ``other``'s winning.

        The sharing is ``other``'s where it has one, else this one's.
        """
        return NetworkModel(
            {**self.links, **other.links},
            {**self.hosts, **other.hosts},
            other.sharing or self.sharing,
        )


def network_path(directory: str | Path, hosts: Mapping[str, str]) -> Path:
    """Where the network model of a cluster of ``hosts`` (name: fingerprint) is saved."""
    names = ",".join(f"{name}={hosts[name]}" for name in sorted(hosts))
    return Path(directory) / f"network-{hashlib.sha256(names.encode()).hexdigest()[:16]}.json"


def save_network(model: NetworkModel, path: str | Path) -> None:
    """Write ``model`` to ``path`` as JSON, atomically."""
    document = {
        "format": NETWORK_FORMAT,
        "hosts": model.hosts,
        "links": [
            {
                "from": a,
                "to": b,
                "regimes": [
                    {
                        "upto_bytes": None if math.isinf(r.upto_bytes) else r.upto_bytes,
                        "latency_s": r.latency_s,
                        "bytes_per_s": r.bytes_per_s,
                    }
                    for r in link.regimes
                ],
                "measured": [list(row) for row in link.measured],
            }
            for (a, b), link in sorted(model.links.items())
        ],
    }
    if model.sharing is not None:
        document["sharing"] = {
            "hosts": list(model.sharing.hosts),
            "share": model.sharing.share,
            "overhead_s": model.sharing.overhead_s,
            "measured": [list(point) for point in model.sharing.measured],
        }
    text = json.dumps(document, indent=1, allow_nan=False) + "\n"
    atomic_write_bytes(Path(path), text.encode())


def load_network(path: str | Path) -> NetworkModel:
    """The model saved at ``path``; :class:`ProfileError` if missing, of another format, or bad."""
    try:
        document = json.loads(Path(path).read_text(), parse_constant=_no_constant)
    except (OSError, ValueError) as error:  # unreadable, not UTF-8, not JSON, NaN
        raise ProfileError(f"cannot read the network model {path}: {error}") from None
    if not isinstance(document, dict) or document.get("format") != NETWORK_FORMAT:
        raise ProfileError(f"{path} is not a network model of format {NETWORK_FORMAT!r}")
    try:
        hosts = {str(k): str(v) for k, v in dict(document["hosts"]).items()}
        links = {(str(row["from"]), str(row["to"])): _link(row) for row in document["links"]}
        sharing = _sharing(document["sharing"]) if "sharing" in document else None
    except (KeyError, TypeError, ValueError) as error:
        raise ProfileError(f"the network model {path} is damaged: {error!r}") from None
    return NetworkModel(links, hosts, sharing)


def _sharing(part: Any) -> Sharing:
    """The saved sharing of the hosts on the driver's machine, checked."""
    measured = tuple(
        (float(seconds), float(efficiency)) for seconds, efficiency in part["measured"]
    )
    hosts = tuple(str(host) for host in part["hosts"])
    return Sharing(hosts, float(part["share"]), float(part["overhead_s"]), measured)


def _link(row: Any) -> Link:
    """One saved link, checked."""
    measured = tuple((int(n), float(t), int(r)) for n, t, r in row["measured"])
    regimes = tuple(
        Regime(
            math.inf if part["upto_bytes"] is None else float(part["upto_bytes"]),
            float(part["latency_s"]),
            float(part["bytes_per_s"]),
        )
        for part in row["regimes"]
    )
    return Link(regimes, measured)


def _no_constant(name: str) -> None:
    """Refuse NaN and Infinity, which this format never writes."""
    raise ValueError(f"{name} is not a number this format writes")
