"""A profile per host: the profiler run on each host of a cluster, saved under its fingerprint.

Each host is profiled by a Ray task pinned to it (:meth:`autopart.cluster.session.Host.pin`),
so what it measures is what that host's cores do. Hosts of one fingerprint (the same
hardware, drivers, libraries and cores) share one profile, taken on the first of them.
Hosts are profiled one at a time: on a machine that also runs the others, a timing taken
while another host measures would be a timing of both.

The task starts from the profile this process already holds for that fingerprint, so only
what it lacks is measured, and sends the whole profile back as text. It is checked
(:meth:`~autopart.profile.Profile.load`) and written atomically here, beside the local
machine's profiles: a host's disk may be another machine's.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autopart.cluster.hosts import describe_hosts
from autopart.cluster.session import Host, import_ray, lost_host, remote_refusal
from autopart.errors import AutopartError, ProfileError
from autopart.io import atomic_write_bytes
from autopart.ir.graph import Graph
from autopart.ir.onnx_export import to_onnx
from autopart.profile import Profile
from autopart.profile.saved import default_profiles_dir

HOST_PROFILE_TIMEOUT_S = 3600.0
WHOLE_RUNS = 5  # each target's whole-model runs on its host, to scale its op sum by


@dataclass(frozen=True)
class HostProfile:
    """What profiling one host did: its profile's ``path`` and the run's figures.

    ``shared_with`` names the host whose profile this host shares (the same fingerprint);
    the figures are then that host's. ``whole_s`` is the whole model's median time on each
    target the profile prices for every node, run alone in one partition on the host.
    """

    host: str
    fingerprint: str
    path: Path
    new: int
    reused: int
    missing: int
    elapsed_s: float
    notes: tuple[str, ...] = ()
    shared_with: str | None = None
    whole_s: Mapping[str, float] = field(default_factory=dict)


def profile_hosts(
    graph: Graph,
    hosts: Sequence[Host],
    targets: Sequence[str] | None = None,
    profiles: str | Path | None = None,
    budget_s: float | None = None,
    announce: Callable[[str], None] | None = None,
) -> list[HostProfile]:
    """Profile ``graph`` on each of ``hosts`` (once per fingerprint), one host at a time.

    ``targets`` are target specs without a host (default: all each host offers);
    ``budget_s`` bounds each host's measuring. :class:`~autopart.cluster.session.HostLostError`
    names a host that was lost; :class:`ProfileError` one whose profile came back damaged.
    """
    ray = import_ray()
    directory = Path(profiles) if profiles is not None else default_profiles_dir()
    directory.mkdir(parents=True, exist_ok=True)
    model = to_onnx(graph).SerializeToString()
    task = ray.remote(num_cpus=0, max_retries=0)(_profile_here)
    done: dict[str, HostProfile] = {}
    found = []
    for described in describe_hosts(hosts):
        host, fingerprint = described.host, described.fingerprint
        path = directory / f"{fingerprint}.csv"
        if fingerprint in done:
            found.append(_shared(done[fingerprint], host.name))
            continue
        if announce is not None:
            announce(f"profiling {host.name} ({host.address}, fingerprint {fingerprint})")
        saved = path.read_bytes() if path.exists() else None
        call = task.options(scheduling_strategy=host.placement())
        try:
            facts = ray.get(call.remote(host, model, targets, saved, budget_s),
                            timeout=HOST_PROFILE_TIMEOUT_S)  # fmt: skip
        except Exception as error:  # a lost node, a timeout, or the profiler's own error
            refused = remote_refusal(error)
            if refused is not None:
                raise ProfileError(f"host {host.name}: {refused}") from None
            raise lost_host([host], "profiling", error) from None
        _save_checked(facts["text"], path, fingerprint)
        done[fingerprint] = HostProfile(
            host.name, fingerprint, path, facts["new"], facts["reused"], facts["missing"],
            facts["elapsed_s"], tuple(facts["notes"]), None, _whole_checked(facts["whole_s"]),
        )  # fmt: skip
        found.append(done[fingerprint])
    return found


def _shared(profiled: HostProfile, host: str) -> HostProfile:
    """``host``'s entry for the profile it shares with ``profiled``'s host."""
    return HostProfile(host, profiled.fingerprint, profiled.path, profiled.new,
                       profiled.reused, profiled.missing, profiled.elapsed_s,
                       profiled.notes, profiled.host, profiled.whole_s)  # fmt: skip


def _save_checked(text: bytes, path: Path, fingerprint: str) -> None:
    """Write the profile a host sent back, once it reads back whole and is that host's."""
    with tempfile.TemporaryDirectory() as folder:
        staged = Path(folder) / path.name
        staged.write_bytes(text)
        profile = Profile.load(staged)
        wrong = profile.fingerprint != fingerprint
        if wrong or profile.dropped.count:
            why = "of another machine" if wrong else "; ".join(profile.dropped.notes())
            raise ProfileError(f"the profile of host fingerprint {fingerprint} came back {why}")
    atomic_write_bytes(path, text)


def _profile_here(
    host: Host,
    model: bytes,
    targets: Sequence[str] | None,
    saved: bytes | None,
    budget_s: float | None,
) -> dict[str, Any]:
    """Profile ``model`` here (on ``host``, pinned to its cores), from the ``saved`` profile."""
    import onnx

    from autopart.loader import load_model
    from autopart.profile.saved import machine_profile_path
    from autopart.targets.devices import discover
    from autopart.tuning.profile_model import profile_model

    host.pin()
    graph = load_model(onnx.ModelProto.FromString(model))
    with tempfile.TemporaryDirectory() as folder:
        path = machine_profile_path(folder, discover())
        if saved is not None:
            path.write_bytes(saved)
        report, _, written = profile_model(graph, targets, folder, budget_s=budget_s)
        whole = _time_whole(graph, Profile.load(written), targets)
        return {"text": written.read_bytes(), "new": report.new, "reused": report.reused,
                "missing": report.missing, "elapsed_s": report.elapsed_s,
                "notes": list(report.notes), "whole_s": whole}  # fmt: skip


def _time_whole(graph: Graph, profile: Profile, targets: Sequence[str] | None) -> dict[str, float]:
    """Each target's median time for the whole of ``graph``, alone in one partition.

    For every target of ``targets`` (None: every one ``profile`` holds) that ``profile``
    prices for every node: :data:`WHOLE_RUNS` runs after two untimed. A target that
    cannot compile or run the whole model here is left out.
    """
    from autopart.costmodel import costs_from_profile
    from autopart.costmodel.from_profile import profile_targets
    from autopart.ir.feeds import random_inputs
    from autopart.ir.target import VirtualDevice
    from autopart.plan.build import build_plan_for
    from autopart.runtime.plan_executor import PlanExecutor

    feeds = random_inputs(graph, 0)
    asked = None if targets is None else {str(VirtualDevice.parse(t)) for t in targets}
    timed: dict[str, float] = {}
    for target in profile_targets(profile):
        if asked is not None and str(target) not in asked:
            continue  # the saved profile holds it, but this tune does not use it
        try:
            costs_from_profile(graph, profile, [target])
            plan = build_plan_for(graph, dict.fromkeys((n.name for n in graph.nodes), target),
                                  target, "whole")  # fmt: skip
            with PlanExecutor(plan, graph) as executor:
                timed[str(target)] = executor.run(feeds, repeat=WHOLE_RUNS, warmup=2).median_s
        except (AutopartError, RuntimeError):  # not priced for every node, or fails here
            continue
    return timed


def _whole_checked(whole: object) -> dict[str, float]:
    """The whole-model timings a host sent back: target texts to positive, finite seconds."""
    if not isinstance(whole, dict) or not all(
        isinstance(k, str) and isinstance(v, float) and math.isfinite(v) and v > 0
        for k, v in whole.items()
    ):
        raise ProfileError(f"a host's whole-model timings came back damaged: {whole!r}")
    return dict(whole)
