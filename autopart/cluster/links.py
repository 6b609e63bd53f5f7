"""Timing transfers between hosts, over the channel the executor uses, and fitting links.

A transfer from host A to host B is timed as the executor makes it: an actor on A sends an
array over a fixed channel (:mod:`autopart.cluster.channels`) to an actor on B, whose
thread hands it on and acknowledges it at once. The actor on A times each round trip on
its own clock, with no Ray call inside it. A transfer's time is that round trip less one
acknowledgement's way, half the round trip of a one-byte payload between the same two
actors. A link is fitted as latency plus bytes over bandwidth, in up to three regimes of
sizes split where the fit is closest (:func:`~autopart.costmodel.network.fit_link_regimes`).
"""

from __future__ import annotations

import contextlib
import secrets
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import permutations
from pathlib import Path
from typing import Any

import numpy as np

from autopart.cluster.channels import Channel, Inbox, Message, connect, send
from autopart.cluster.session import Host, import_ray, lost_host, stop_actor
from autopart.costmodel.network import (
    Link,
    NetworkModel,
    fit_link_regimes,
    load_network,
    network_path,
    save_network,
)

SIZES = (*(1000 * 4**k for k in range(8)), 64_000_000)  # 1 KB to 64 MB
RUNS = 7
CALL_TIMEOUT_S = 120.0
LEAST_TIMING_S = 0.25  # each size's timings, where runs alone take less
MOST_RUNS_PER_RUN = 100  # ... up to this many times --runs


class _Endpoint:
    """An actor on one host that sends arrays over the executor's channels and times them.

    It listens twice: for payloads, each of which its thread acknowledges to the sender at
    once, and for those acknowledgements of its own payloads.
    """

    def __init__(self, host: Host, name: str) -> None:
        host.pin()
        self.host, self.name = host, name
        self.payloads: Inbox | None = None
        self.acks: Inbox | None = None
        self.to_payloads: dict[str, Channel] = {}

    def open(self, authkey: bytes) -> tuple[tuple[str, int], tuple[str, int]]:
        """Listen; the addresses of this endpoint's payload and acknowledgement inboxes."""
        self.payloads = Inbox(self.host.address, authkey)
        self.acks = Inbox(self.host.address, authkey)
        return self.payloads.address, self.acks.address

    def wire(self, addresses: dict[str, tuple[Any, Any]], authkey: bytes) -> bool:
        """Connect to every endpoint's inboxes (this one's too), and start acknowledging."""
        self.to_payloads = {n: connect(p, authkey, self.name) for n, (p, _) in addresses.items()}
        to_acks = {n: connect(a, authkey, self.name) for n, (_, a) in addresses.items()}
        threading.Thread(target=self._acknowledge, args=(to_acks,), daemon=True).start()
        return True

    def _acknowledge(self, to_acks: dict[str, Channel]) -> None:
        assert self.payloads is not None
        while True:  # until the actor stops: a sender lost leaves the others served
            item = self.payloads.get()
            if isinstance(item, Message):
                with contextlib.suppress(OSError):  # that sender is gone, and knows it
                    send(to_acks[item.sender], item.tag, {})

    def round_trips(self, destination: str, nbytes: int, runs: int) -> list[float]:
        """Seconds from sending ``nbytes`` to ``destination`` to its acknowledgement.

        Timed at least ``runs`` times, after one untimed send, and on for
        :data:`LEAST_TIMING_S` where transfers are quick (up to ``MOST_RUNS_PER_RUN`` times
        ``runs``): a transfer of microseconds on shared cores needs many to settle a median.
        """
        assert self.acks is not None
        array = np.full(nbytes, 7, dtype=np.uint8)
        times: list[float] = []
        began = time.perf_counter()
        for tag in range(runs * MOST_RUNS_PER_RUN + 1):
            if tag > runs and time.perf_counter() - began >= LEAST_TIMING_S:
                break
            started = time.perf_counter()
            send(self.to_payloads[destination], tag, {"payload": array})
            while not isinstance(answer := self.acks.get(timeout=CALL_TIMEOUT_S), Message):
                if answer.sender == destination:
                    raise ConnectionError(f"{destination} closed its channel")
            times.append(time.perf_counter() - started)
        return times[1:]

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

    Each host is also timed to itself: a message within the host, which every stage a plan
    runs there pays. Each size is timed at least ``runs`` times (after one untimed
    transfer), and on for :data:`LEAST_TIMING_S` where transfers are quick; its median is
    kept, with how many timings it is of.
    :class:`~autopart.cluster.session.HostLostError` names a host that was lost or did not answer.
    """
    ray = import_ray()
    actor = ray.remote(num_cpus=0, max_restarts=0)(_Endpoint)
    endpoints = {
        h.name: actor.options(scheduling_strategy=h.placement()).remote(h, h.name) for h in hosts
    }
    try:
        _get(ray, [e.ready.remote() for e in endpoints.values()], "starting on every host", hosts)
        authkey = secrets.token_bytes(32)
        opened = _get(ray, [e.open.remote(authkey) for e in endpoints.values()], "listening", hosts)
        addresses = dict(zip(endpoints, opened, strict=True))
        _get(ray, [e.wire.remote(addresses, authkey) for e in endpoints.values()], "wiring", hosts)
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
        pair = [by_name[a], by_name[b]]
        what = f"{a} -> {b}"
        acknowledged = (
            statistics.median(
                _get(ray, [endpoints[a].round_trips.remote(b, 1, runs)], what, pair)[0]
            )
            / 2
        )  # a one-byte payload's round trip: an acknowledgement each way
        medians, counts = [], []
        for nbytes in sizes:
            if progress is not None:
                progress(done, total, f"{what}: {nbytes:,} bytes")
            trips = _get(ray, [endpoints[a].round_trips.remote(b, nbytes, runs)], what, pair)[0]
            medians.append(max(statistics.median(trips) - acknowledged, acknowledged / 10))
            counts.append(len(trips))
            done += 1
        links[(a, b)] = fit_link_regimes(sizes, medians, counts)
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


def _get(ray: Any, references: list[Any], what: str, hosts: Sequence[Host]) -> Any:
    """``ray.get`` within :data:`CALL_TIMEOUT_S`; else the lost host of ``hosts``."""
    try:
        return ray.get(references, timeout=CALL_TIMEOUT_S)
    except Exception as error:  # a lost node, an actor that died, a timeout
        raise lost_host(hosts, f"timing {what}", error) from None
