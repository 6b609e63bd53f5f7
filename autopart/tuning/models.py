"""Loading a model and profiling it on this machine: the first stages of a tune.

:mod:`autopart.api` exposes both (``load``, ``profile``); they live here so that the
tuning workflow below the API can use them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx

from autopart.io import check_writable
from autopart.ir.graph import Graph
from autopart.ir.onnx_import import load_graph
from autopart.profile import (
    Profile,
    Profiler,
    ProfileReport,
    TimingSettings,
    default_profiles_dir,
    machine_profile_path,
    open_for_measuring,
)
from autopart.progress import Progress
from autopart.targets.devices import discover
from autopart.targets.resolve import available_targets
from autopart.tuning.options import check_budget
from autopart.zoo import resolve_model

ModelLike = str | Path | onnx.ModelProto | Graph


def load_model(model: ModelLike, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Import a zoo name, an ``.onnx`` path, a ModelProto (or pass a Graph through).

    ``input_shapes`` fixes the named inputs' shapes. A name or path is recorded as the
    graph's ``meta["source"]``.
    """
    if isinstance(model, Graph):
        return model
    graph = load_graph(resolve_model(model), input_shapes)
    if isinstance(model, str | Path):
        graph.meta["source"] = str(model)
    return graph


def profile_model(
    graph: Graph,
    targets: Sequence[str] | None = None,
    profiles: str | Path | None = None,
    *,
    budget_s: float | None = None,
    progress: Progress | None = None,
    settings: TimingSettings | None = None,
    checkpoint_s: float = 3.0,
    refresh: bool = False,
) -> tuple[ProfileReport, Profile, Path]:
    """Measure what this machine's saved profile lacks for ``graph``.

    ``targets`` are target specs (default: every target found). Measurements go to
    ``<profiles>/<fingerprint>.csv`` (default: :func:`autopart.profile.default_profiles_dir`),
    checkpointed every ``checkpoint_s`` seconds. With ``refresh`` everything ``graph``
    needs on ``targets`` is measured again and replaces the saved rows. Returns the report,
    the profile and its path.
    """
    if budget_s is not None:
        check_budget(budget_s, "budget", allow_zero=True)
    machine = discover()
    chosen = list(targets) if targets else [str(t) for t in available_targets(machine)]
    path = machine_profile_path(profiles or default_profiles_dir(), machine)
    check_writable(path, "profile")
    saved = open_for_measuring(path, machine)
    profiler = Profiler(saved, machine, path, settings, checkpoint_s)
    report = profiler.profile_graph(graph, chosen, budget_s, progress, refresh)
    return report, saved, path
