"""The Python API; each function mirrors one CLI command."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from autopart.errors import AutopartError
from autopart.ir.analysis import GraphSummary, summarise
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.ir.onnx_import import load_graph
from autopart.plan.assign import plan_from_rules
from autopart.plan.build import place_plan
from autopart.plan.schema import Plan, PlanError
from autopart.plan.validate import validate_plan
from autopart.profile import (
    Profile,
    Profiler,
    ProfileReport,
    TimingSettings,
    default_profiles_dir,
    machine_profile_path,
    open_for_measuring,
)
from autopart.profile.profiler import Progress
from autopart.runtime.executor import Executor, RunResult
from autopart.runtime.plan_executor import PlanExecutor, PlanRunResult
from autopart.targets.devices import Machine, discover
from autopart.targets.resolve import available_targets
from autopart.zoo import resolve_model

ModelLike = str | Path | onnx.ModelProto | Graph


def load(model: ModelLike, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Import a zoo name, an ``.onnx`` path, a ModelProto (or pass a Graph through)."""
    if isinstance(model, Graph):
        return model
    graph = load_graph(resolve_model(model), input_shapes)
    if isinstance(model, str | Path):
        graph.meta["source"] = str(model)
    return graph


def info(model: ModelLike, input_shapes: Mapping[str, Sequence[int]] | None = None) -> GraphSummary:
    """Op histogram, parameter bytes, FLOP estimate, inputs and outputs (``autopart info``)."""
    return summarise(load(model, input_shapes))


def run(
    model: ModelLike,
    inputs: Mapping[str, np.ndarray] | None = None,
    repeat: int = 1,
    warmup: int = 1,
    seed: int = 0,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> RunResult:
    """Run every node on ``cpu@numpy`` (``autopart run MODEL``).

    Without ``inputs``, seeded random inputs are used. Returns the outputs and the latency
    of each of the ``repeat`` timed runs.
    """
    graph = load(model, input_shapes)
    feeds = dict(inputs) if inputs is not None else random_inputs(graph, seed)
    return Executor(graph).run(feeds, repeat=repeat, warmup=warmup)


def devices() -> Machine:
    """Every device found here, with its units (``autopart devices``)."""
    return discover()


def make_plan(
    model: ModelLike,
    assign: Sequence[str] = (),
    fallback: str = "cpu@numpy",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> tuple[Plan, Graph]:
    """A plan from ``SELECTOR=TARGET`` rules; unassigned or unsupported nodes use ``fallback``."""
    graph = load(model, input_shapes)
    source = str(graph.meta.get("source", graph.name))
    return plan_from_rules(graph, assign, fallback, source), graph


def load_plan(path: str | Path) -> tuple[Plan, Graph]:
    """Read a plan file and import the model it names (checked against the plan's hash).

    The returned graph's nodes carry the plan's targets (:func:`autopart.plan.build.place_plan`).
    """
    plan = Plan.load(path)
    try:
        graph = load(plan.model.source, plan.model.input_shapes or None)
    except AutopartError as error:
        raise PlanError(f"the plan's model {plan.model.source!r} cannot load: {error}") from None
    validate_plan(plan, graph)
    return plan, place_plan(graph, plan)


def run_plan(
    plan: Plan,
    graph: Graph,
    inputs: Mapping[str, np.ndarray] | None = None,
    repeat: int = 1,
    warmup: int = 1,
    seed: int = 0,
    concurrent: bool = True,
) -> PlanRunResult:
    """Run ``plan`` on the real targets (``autopart run PLAN.json``)."""
    feeds = dict(inputs) if inputs is not None else random_inputs(graph, seed)
    with PlanExecutor(plan, graph) as executor:
        return executor.run(feeds, repeat=repeat, warmup=warmup, concurrent=concurrent)


def check_outputs(
    graph: Graph,
    inputs: Mapping[str, np.ndarray],
    outputs: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray] | None = None,
) -> dict[str, float]:
    """Max relative error of each output against the numpy reference on the same inputs.

    ``reference`` passes outputs of the numpy reference computed earlier on ``inputs``.
    """
    if reference is None:
        reference = Executor(graph).run(inputs).outputs
    errors = {}
    for name, expected in reference.items():
        got = np.asarray(outputs[name], dtype=np.float64)
        scale = float(np.abs(expected).max()) or 1.0
        errors[name] = float(np.abs(got - expected).max()) / scale if expected.size else 0.0
    return errors


def profile(
    model: ModelLike,
    targets: Sequence[str] | None = None,
    profiles: str | Path | None = None,
    budget_s: float | None = None,
    progress: Progress | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    settings: TimingSettings | None = None,
    checkpoint_s: float = 3.0,
    refresh: bool = False,
) -> tuple[ProfileReport, Profile, Path]:
    """Measure what this machine's saved profile lacks for ``model`` (``autopart profile``).

    ``targets`` are target specs (default: every target found). Measurements go to
    ``<profiles>/<fingerprint>.csv`` (default directory: :func:`default_profiles_dir`),
    checkpointed every ``checkpoint_s`` seconds. With ``refresh`` everything ``model`` needs
    on ``targets`` is measured again, and the new rows replace the saved ones (a profile
    taken in a slow spell of the machine, say). Returns the report, the profile and its path.
    """
    graph = load(model, input_shapes)
    machine = discover()
    chosen = list(targets) if targets else [str(t) for t in available_targets(machine)]
    path = machine_profile_path(profiles or default_profiles_dir(), machine)
    saved = open_for_measuring(path, machine)
    profiler = Profiler(saved, machine, path, settings, checkpoint_s)
    report = profiler.profile_graph(graph, chosen, budget_s, progress, refresh)
    return report, saved, path
