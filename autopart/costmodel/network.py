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
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from autopart.errors import ProfileError
from autopart.io import atomic_write_bytes

NETWORK_FORMAT = "autopart.network 1"


@dataclass(frozen=True)
class Link:
    """One direction between two hosts: ``latency_s`` plus bytes over ``bytes_per_s``.

    ``measured`` holds the timings it was fitted to, as (bytes, median seconds, runs);
    empty for a link the user wrote.
    """

    latency_s: float
    bytes_per_s: float
    measured: tuple[tuple[int, float, int], ...] = ()

    def __post_init__(self) -> None:
        if not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise ValueError(f"a link's latency must be finite and >= 0, not {self.latency_s}")
        if not (math.isfinite(self.bytes_per_s) and self.bytes_per_s > 0):
            raise ValueError(f"a link's bandwidth must be finite and > 0, not {self.bytes_per_s}")

    def seconds(self, nbytes: int | float) -> float:
        """The predicted time to move ``nbytes`` over this link."""
        return self.latency_s + float(nbytes) / self.bytes_per_s

    def worst_error(self) -> float:
        """The largest relative error of the prediction on the timings it was fitted to."""
        return max((abs(self.seconds(n) / t - 1) for n, t, _ in self.measured), default=0.0)


def fit_link(nbytes: Sequence[int], seconds: Sequence[float], runs: Sequence[int] = ()) -> Link:
    """The :class:`Link` whose prediction is nearest, relatively, to ``seconds`` at ``nbytes``.

    Needs at least two distinct sizes and positive times; raises :class:`ValueError`
    otherwise. ``runs`` (how many timings each median is of) is kept with the data.
    """
    sizes = np.asarray(nbytes, dtype=float)
    times = np.asarray(seconds, dtype=float)
    if len(sizes) != len(times) or len(set(sizes.tolist())) < 2:
        raise ValueError("a link is fitted to timings of at least two sizes")
    if not (np.all(np.isfinite(times)) and np.all(times > 0)):
        raise ValueError("a link is fitted to positive, finite times")
    # in units where both parameters are near 1: latency in ms, seconds per MB
    slope_guess = max(float(np.polyfit(sizes, times, 1)[0]), 1e-12) * 1e6
    start = [max(float(times.min()) * 1e3, 1e-6), slope_guess]

    def relative(params: np.ndarray) -> np.ndarray:
        return (params[0] * 1e-3 + params[1] * 1e-6 * sizes) / times - 1

    fit = least_squares(relative, start, bounds=([0.0, 1e-9], [np.inf, np.inf]))
    latency_ms, seconds_per_mb = (float(x) for x in fit.x)
    counts = list(runs) or [1] * len(sizes)
    measured = tuple(
        (int(n), float(t), int(r)) for n, t, r in zip(sizes, times, counts, strict=True)
    )
    return Link(latency_ms * 1e-3, 1e6 / seconds_per_mb, measured)


@dataclass
class NetworkModel:
    """Links between named hosts, by ordered pair (``a``, ``b``); a host to itself is free.

    ``hosts`` maps each host to its fingerprint where known. :meth:`seconds` falls back to
    the reverse direction when only that one is known.
    """

    links: dict[tuple[str, str], Link] = field(default_factory=dict)
    hosts: dict[str, str] = field(default_factory=dict)

    def link(self, a: str, b: str) -> Link | None:
        """The link from ``a`` to ``b`` (or from ``b`` to ``a``), or ``None``."""
        return self.links.get((a, b)) or self.links.get((b, a))

    def seconds(self, a: str, b: str, nbytes: int | float) -> float:
        """The predicted time to move ``nbytes`` from host ``a`` to host ``b``.

        Zero on one host; :class:`ProfileError` when the model has no link between them.
        """
        if a == b:
            return 0.0
        link = self.link(a, b)
        if link is None:
            raise ProfileError(f"the network model has no link between {a} and {b}")
        return link.seconds(nbytes)

    def merged(self, other: NetworkModel) -> NetworkModel:
        """A model of these links with ``other``'s (and hosts) added, ``other``'s winning."""
        return NetworkModel({**self.links, **other.links}, {**self.hosts, **other.hosts})


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
                "latency_s": link.latency_s,
                "bytes_per_s": link.bytes_per_s,
                "measured": [list(row) for row in link.measured],
            }
            for (a, b), link in sorted(model.links.items())
        ],
    }
    atomic_write_bytes(Path(path), (json.dumps(document, indent=1) + "\n").encode())


def load_network(path: str | Path) -> NetworkModel:
    """The model saved at ``path``; :class:`ProfileError` if missing, of another format, or bad."""
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ProfileError(f"cannot read the network model {path}: {error}") from None
    if not isinstance(document, dict) or document.get("format") != NETWORK_FORMAT:
        raise ProfileError(f"{path} is not a network model of format {NETWORK_FORMAT!r}")
    try:
        hosts = {str(k): str(v) for k, v in dict(document["hosts"]).items()}
        links = {(str(row["from"]), str(row["to"])): _link(row) for row in document["links"]}
    except (KeyError, TypeError, ValueError) as error:
        raise ProfileError(f"the network model {path} is damaged: {error!r}") from None
    return NetworkModel(links, hosts)


def _link(row: Any) -> Link:
    """One saved link, checked."""
    measured = tuple((int(n), float(t), int(r)) for n, t, r in row["measured"])
    return Link(float(row["latency_s"]), float(row["bytes_per_s"]), measured)
