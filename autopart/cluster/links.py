"""Timing transfers between hosts, over the channel the executor uses, and fitting links.

A transfer from host A to host B is timed as the executor will make it: an array made by
an actor on A (held in A's object store, or inline when Ray keeps it small) is passed by
reference to a call of an actor on B, which receives it whole. The time is the driver's
wall clock around that call, so a link's latency includes one actor call. Every timed
transfer moves a fresh object: Ray keeps a copy where an object was pulled, and a second
pull of the same object would be free. A link is fitted in two regimes, split where Ray
stops passing objects inline (:data:`RAY_INLINE_BYTES`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import permutations
from pathlib import Path
from typing import Any

import numpy as np

from autopart.cluster.session import Host, import_ray, lost_host, stop_actor
from autopart.costmodel.network import (
    Link,
    NetworkModel,
    fit_link,
    load_network,
    network_path,
    save_network,
)

SIZES = (*(1000 * 4**k for k in range(8)), 64_000_000)  # 1 KB to 64 MB
# Ray passes an object of up to 100 KiB inline with the call that reads it (its
# max_direct_call_object_size), and a larger one through the object stores: two regimes.
RAY_INLINE_BYTES = 100 * 1024
RUNS = 7
CALL_TIMEOUT_S = 120.0


class _Endpoint:
    """An actor on one host that makes arrays and receives them (Ray wraps it remotely)."""

    def __init__(self, host: Host) -> None:
        host.pin()

    def make(self, nbytes: int) -> np.ndarray:
        """An array of ``nbytes`` bytes, made on this host."""
        return np.full(nbytes, 7, dtype=np.uint8)

    def take(self, array: np.ndarray) -> int:
        """Receive ``array`` whole (touching its last byte); its size."""
        return int(array.nbytes) + int(array[-1]) * 0

    def ready(self) -> bool:
        """Whether the actor has started."""
        return True


def measure_links(
    hosts: Sequence[Host],
    sizes: Sequence[int] = SIZES,
    runs: int = RUNS,
    progress: Callable[[int, int, str], None] | None = None,
) -> NetworkModel:
    """Time transfers of ``sizes`` between every ordered pair of ``hosts`` and fit each link.

    Each host is also timed to itself: a call within the host, which every stage a plan
    runs there pays. Each size is timed ``runs`` times (after one untimed transfer) and
    its median kept.
    :class:`~autopart.cluster.session.HostLostError` names a host that was lost or did not answer.
    """
    ray = import_ray()
    actor = ray.remote(num_cpus=0, max_restarts=0)(_Endpoint)
    endpoints = {h.name: actor.options(scheduling_strategy=h.placement()).remote(h) for h in hosts}
    try:
        _get(ray, [e.ready.remote() for e in endpoints.values()], "starting on every host", hosts)
        links = _timed_links(ray, endpoints, hosts, sizes, runs, progress)
    finally:
        for endpoint in endpoints.values():
            stop_actor(ray, endpoint)
    return NetworkModel(links)


def _timed_links(
    ray: Any,
    endpoints: Mapping[str, Any],
    hosts: Sequence[Host],
    sizes: Sequence[int],
    runs: int,
    progress: Callable[[int, int, str], None] | None,
) -> dict[tuple[str, str], Link]:
    """Each ordered pair of ``hosts`` (and each host to itself), timed at ``sizes`` and fitted."""
    by_name = {h.name: h for h in hosts}
    names = list(by_name)
    pairs = [*permutations(names, 2), *((name, name) for name in names)]
    links: dict[tuple[str, str], Link] = {}
    total, done = len(pairs) * len(sizes), 0
    for a, b in pairs:
        medians = []
        for nbytes in sizes:
            if progress is not None:
                progress(done, total, f"{a} -> {b}: {nbytes:,} bytes")
            pair = [by_name[a], by_name[b]]
            times = [
                _timed(ray, endpoints[a], endpoints[b], nbytes, f"{a} -> {b}", pair)
                for _ in range(runs + 1)
            ][1:]
            medians.append(statistics.median(times))
            done += 1
        links[(a, b)] = fit_link(sizes, medians, [runs] * len(sizes), [RAY_INLINE_BYTES])
    return links


def network_of(
    hosts: Sequence[Host],
    fingerprints: Mapping[str, str],
    directory: Path,
    remeasure: bool = False,
    runs: int = RUNS,
) -> tuple[NetworkModel, Path]:
    """The network model of ``hosts`` saved in ``directory``, or measured now and saved.

    The file is named after the hosts' ``fingerprints`` (host: fingerprint), which the
    model keeps. With ``remeasure`` it is always measured again. One host has no network
    but its link to itself: the call each stage run there pays.
    """
    path = network_path(directory, fingerprints)
    if path.exists() and not remeasure:
        return load_network(path), path
    model = measure_links(hosts, runs=runs)
    model.hosts = dict(fingerprints)
    directory.mkdir(parents=True, exist_ok=True)
    save_network(model, path)
    return model, path


def _timed(
    ray: Any, source: Any, destination: Any, nbytes: int, what: str, hosts: Sequence[Host]
) -> float:
    """Seconds for ``destination`` to receive a fresh array of ``nbytes`` made on ``source``."""
    made = source.make.remote(nbytes)
    _get(ray, [made], what, hosts, wait_only=True)
    started = time.perf_counter()
    _get(ray, [destination.take.remote(made)], what, hosts)
    return time.perf_counter() - started


def _get(
    ray: Any, references: list[Any], what: str, hosts: Sequence[Host], wait_only: bool = False
) -> Any:
    """``ray.get`` (or only wait) within :data:`CALL_TIMEOUT_S`; else the lost host of ``hosts``."""
    try:
        if wait_only:
            ready, _ = ray.wait(references, num_returns=len(references), timeout=CALL_TIMEOUT_S)
            if len(ready) < len(references):
                raise TimeoutError(f"no answer in {CALL_TIMEOUT_S:.0f} s")
            return ready
        return ray.get(references, timeout=CALL_TIMEOUT_S)
    except Exception as error:  # a lost node, an actor that died, a timeout
        raise lost_host(hosts, f"timing {what}", error) from None
