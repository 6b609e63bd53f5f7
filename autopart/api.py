"""The Python API; each function mirrors one CLI command.

Everything here is public and stable: the docstrings are the contract. ``autopart.tune``,
``autopart.bench``, ``autopart.load``, ``autopart.info`` and ``autopart.run`` are also
exported from the package.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autopart.cluster.hosts import HostDescription, describe_hosts
from autopart.cluster.links import RUNS, network_of
from autopart.cluster.session import cluster
from autopart.costmodel.network import NetworkModel
from autopart.errors import AutopartError
from autopart.ir.analysis import GraphSummary, summarise
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.loader import FreezeValues, InputShapes, ModelLike, load_model
from autopart.plan.assign import plan_from_rules
from autopart.plan.build import place_plan
from autopart.plan.schema import Plan, PlanError
from autopart.plan.validate import validate_plan
from autopart.profile import Profile, ProfileReport, TimingSettings
from autopart.profile.saved import default_profiles_dir
from autopart.progress import Progress, StageProgress
from autopart.runtime.executor import Executor, RunResult
from autopart.runtime.host_sharing import with_sharing
from autopart.runtime.hosts import ClusterPlanExecutor, Stage, StreamResult
from autopart.runtime.plan_executor import PlanExecutor, PlanRunResult
from autopart.targets.devices import Machine, discover
from autopart.targets.resolve import reference_target
from autopart.tuning import host_profiles
from autopart.tuning.host_profiles import HostProfile
from autopart.tuning.judge import dataset_shapes
from autopart.tuning.options import BenchOptions, TuneOptions
from autopart.tuning.oracle import check_outputs
from autopart.tuning.profile_model import profile_model

if TYPE_CHECKING:
    import pandas as pd

    from autopart.tuning.hosts_tune import HostTuneReport
    from autopart.tuning.tune_report import TuneReport

__all__ = [
    "BenchOptions",
    "ModelLike",
    "TuneOptions",
    "bench",
    "check_outputs",
    "devices",
    "info",
    "load",
    "load_plan",
    "make_plan",
    "profile",
    "run",
    "run_plan",
    "tune",
]


def load(
    model: ModelLike,
    input_shapes: InputShapes | None = None,
    freeze: FreezeValues | None = None,
    sample_shapes: Mapping[str, Sequence[int]] | None = None,
) -> Graph:
    """Import a zoo name, an ``.onnx`` path, a ModelProto (or pass a Graph through).

    ``input_shapes`` maps an input's name to its full shape (``{"x": [1, 3, 48, 192]}``) or
    a symbolic dim's name to its size (``{"batch": 1}``); an input's name wins, and other
    symbolic dims are 1. ``freeze`` fixes inputs to values (``{"sr": 16000}``, in the
    input's dtype): they become constants, no longer inputs, and what follows from them
    folds (an ``If`` on them included). Raises :class:`~autopart.errors.ModelError` for a
    name that is neither an input nor a dim name, a shape that disagrees with the model's,
    and a frozen name that is not an input. ``sample_shapes``, the array shapes of one of
    the user's samples by input (a leading sample axis allowed), fix the symbolic dims of
    inputs given no shape (:func:`~autopart.ir.input_shapes.shapes_from_samples`).
    """
    return load_model(model, input_shapes, freeze, sample_shapes)


def info(
    model: ModelLike,
    input_shapes: InputShapes | None = None,
    freeze: FreezeValues | None = None,
) -> GraphSummary:
    """Op histogram, parameter bytes, FLOP estimate, inputs and outputs (``autopart info``)."""
    return summarise(load(model, input_shapes, freeze))


def run(
    model: ModelLike,
    inputs: Mapping[str, np.ndarray] | None = None,
    repeat: int = 1,
    warmup: int = 1,
    seed: int = 0,
    input_shapes: InputShapes | None = None,
    freeze: FreezeValues | None = None,
) -> RunResult:
    """Run every node on the reference, ``cpu@numpy`` (``autopart run MODEL``).

    Without ``inputs``, seeded random inputs are used. Returns the outputs and the latency
    of each of the ``repeat`` timed runs. ``input_shapes`` and ``freeze`` are :func:`load`'s.
    """
    graph = load(model, input_shapes, freeze)
    feeds = dict(inputs) if inputs is not None else random_inputs(graph, seed)
    return Executor(graph).run(feeds, repeat=repeat, warmup=warmup)


def devices() -> Machine:
    """Every device found here, with its units (``autopart devices``)."""
    return discover()


def cluster_devices(spec: str) -> list[HostDescription]:
    """Every host of the Ray cluster ``spec`` (``local:N`` or an address), as found on it.

    Each host's devices, targets, precisions and fingerprint (``autopart devices
    --cluster``). Needs Ray (``pip install -e '.[ray]'``); :class:`ClusterError` otherwise,
    or when the cluster cannot be reached.
    """
    with cluster(spec) as hosts:
        return describe_hosts(hosts)


def measure_network(
    spec: str, profiles: str | Path | None = None, runs: int = RUNS
) -> tuple[NetworkModel, Path]:
    """Time transfers between every pair of hosts of cluster ``spec``, fit links, save them.

    Returns the network model (each host's fingerprint with it) and where it was saved:
    beside the profiles in ``profiles`` (default: the profile directory), named after
    the hosts' fingerprints. See :mod:`autopart.cluster.links`. Where two hosts or more
    share this machine, what they lose streaming together is measured and saved with it
    (:mod:`autopart.runtime.host_sharing`).
    """
    directory = Path(profiles) if profiles is not None else default_profiles_dir()
    with cluster(spec) as hosts:
        fingerprints = {d.host.name: d.fingerprint for d in describe_hosts(hosts)}
        network, path = network_of(hosts, fingerprints, directory, remeasure=True, runs=runs)
        return with_sharing(network, hosts, path, remeasure=True), path


def make_plan(
    model: ModelLike,
    assign: Sequence[str] = (),
    fallback: str | None = None,
    input_shapes: InputShapes | None = None,
    freeze: FreezeValues | None = None,
    sample_shapes: Mapping[str, Sequence[int]] | None = None,
) -> tuple[Plan, Graph]:
    """A plan from ``SELECTOR=TARGET`` rules; unassigned or unsupported nodes use ``fallback``.

    ``fallback`` None is the reference on the whole host (``cpu@numpy``,
    :func:`~autopart.targets.resolve.reference_target`). ``input_shapes``, ``freeze`` and
    ``sample_shapes`` are :func:`load`'s; the plan records the shapes and frozen values.
    """
    graph = load(model, input_shapes, freeze, sample_shapes)
    source = str(graph.meta.get("source", graph.name))
    last = reference_target() if fallback is None else fallback
    return plan_from_rules(graph, assign, last, source), graph


def load_plan(path: str | Path) -> tuple[Plan, Graph]:
    """Read a plan file and import the model it names (checked against the plan's hash).

    The returned graph's nodes carry the plan's targets (:func:`autopart.plan.build.place_plan`).
    """
    plan = Plan.load(path)
    try:
        graph = load(plan.model.source, plan.model.input_shapes or None, plan.model.frozen or None)
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
    cluster_spec: str | None = None,
) -> PlanRunResult:
    """Run ``plan`` on the real targets (``autopart run PLAN.json``).

    With ``cluster_spec`` (``local:N`` or a Ray address), on the hosts of that cluster:
    each stage of the plan on its host (:mod:`autopart.runtime.hosts`); a plan whose
    targets name hosts needs one. Its result has no per-step timings.
    """
    feeds = dict(inputs) if inputs is not None else random_inputs(graph, seed)
    if cluster_spec is not None:
        with cluster(cluster_spec) as hosts:
            executor = ClusterPlanExecutor(plan, graph, hosts)
            try:
                return executor.run(feeds, repeat=repeat, warmup=warmup)
            finally:
                executor.close()
    with PlanExecutor(plan, graph) as executor:
        return executor.run(feeds, repeat=repeat, warmup=warmup, concurrent=concurrent)


def stream_plan(
    plan: Plan,
    graph: Graph,
    samples: Sequence[Mapping[str, np.ndarray]],
    cluster_spec: str,
    warmup: int = 1,
) -> tuple[StreamResult, list[Stage]]:
    """Run ``samples`` through ``plan`` on cluster ``cluster_spec`` as a pipelined stream.

    ``warmup`` inputs (the first sample) go through untimed first. Returns the stream's
    per-input latencies, rate and outputs, and the stages it ran.
    """
    with cluster(cluster_spec) as hosts:
        executor = ClusterPlanExecutor(plan, graph, hosts)
        try:
            if warmup:
                executor.run(samples[0], repeat=warmup)
            return executor.stream(samples), executor.stages
        finally:
            executor.close()


def profile(
    model: ModelLike,
    targets: Sequence[str] | None = None,
    profiles: str | Path | None = None,
    budget_s: float | None = None,
    progress: Progress | None = None,
    input_shapes: InputShapes | None = None,
    settings: TimingSettings | None = None,
    checkpoint_s: float = 3.0,
    refresh: bool = False,
    freeze: FreezeValues | None = None,
) -> tuple[ProfileReport, Profile, Path]:
    """Measure what this machine's saved profile lacks for ``model`` (``autopart profile``).

    ``targets`` are target specs (default: every target found). Measurements go to
    ``<profiles>/<fingerprint>.csv`` (default: :func:`autopart.profile.default_profiles_dir`),
    checkpointed every ``checkpoint_s`` seconds. With ``refresh`` everything ``model`` needs
    on ``targets`` is measured again, and the new rows replace the saved ones (a profile
    taken in a slow spell of the machine, say). Returns the report, the profile and its path.
    ``input_shapes`` and ``freeze`` are :func:`load`'s.
    """
    graph = load(model, input_shapes, freeze)
    return profile_model(
        graph,
        targets,
        profiles,
        budget_s=budget_s,
        progress=progress,
        settings=settings,
        checkpoint_s=checkpoint_s,
        refresh=refresh,
    )


def profile_hosts(
    model: ModelLike,
    cluster_spec: str,
    targets: Sequence[str] | None = None,
    profiles: str | Path | None = None,
    budget_s: float | None = None,
    input_shapes: InputShapes | None = None,
    freeze: FreezeValues | None = None,
    announce: Callable[[str], None] | None = None,
) -> list[HostProfile]:
    """Profile ``model`` on every host of cluster ``cluster_spec``, one profile per fingerprint.

    As :func:`profile`, but each host measures itself (a Ray task pinned to it), one host
    at a time, and its profile is saved here under its fingerprint
    (:mod:`autopart.tuning.host_profiles`). ``budget_s`` bounds each host's measuring.
    """
    graph = load(model, input_shapes, freeze)
    with cluster(cluster_spec) as hosts:
        return host_profiles.profile_hosts(graph, hosts, targets, profiles, budget_s, announce)


def tune(
    model: ModelLike,
    options: TuneOptions | None = None,
    *,
    progress: StageProgress | None = None,
    **fields: Any,
) -> TuneReport | HostTuneReport:
    """Take ``model`` to a verified, saved plan (``autopart tune MODEL``).

    Profiles what this machine's profile lacks, searches every candidate plan, runs the
    distinct ones side by side with their outputs checked, keeps the fastest correct plan
    (the simplest among those the noise cannot tell apart) and saves it with its report
    under ``search_dir``. Options are the fields of :class:`TuneOptions` and of its
    ``search`` (:class:`~autopart.search.options.SearchOptions`: objective, method,
    budget_s, constraints, seed, storage, precision, tolerance), given as ``options`` or as
    flat keywords (keywords win, :meth:`TuneOptions.updated`), e.g. ``tune("squeezenet",
    objective="makespan", budget_s=30)`` or ``tune("vad.onnx", input_shapes={"batch": 1},
    freeze={"sr": 16000})``; an unknown keyword raises TypeError.

    Accuracy: ``dataset`` (any iterable of feeds by input name, as NNCF's ``Dataset``; or
    an ``.npz`` / folder path) gives real samples, split into calibration and validation
    (``validation_split``); ``metric`` judges the plans on the validation samples (a name,
    e.g. ``"agreement"`` or ``"topk:5"``, or a callable ``score(reference, outputs)``,
    higher better) and ``max_drop`` bounds its drop, e.g. ``tune("clf.onnx",
    dataset=samples, metric="agreement", max_drop=0.01)`` (:mod:`autopart.tuning.judge`).
    ``progress(stage, done, total, label)`` is called as the stages advance. Raises an
    :class:`AutopartError` subclass (one-line message) for what a user can get wrong.

    Across the hosts of a Ray cluster (``tune --cluster``): ``cluster="local:2"`` (or an
    address), with ``objective`` ``latency`` or ``throughput``, ``host_memory``,
    ``replan`` and ``links`` (see :class:`TuneOptions`), e.g. ``tune("resnet50",
    cluster="local:2", host_memory={"*": 60_000_000})``; it returns a
    :class:`~autopart.tuning.hosts_tune.HostTuneReport` (:mod:`autopart.tuning.hosts_tune`).
    """
    chosen = (options or TuneOptions()).updated(**fields)
    if chosen.across_hosts:
        from autopart.tuning.hosts_tune import tune_hosts

        seen = None if chosen.dataset is None else dataset_shapes(chosen.dataset)
        graph = load(model, chosen.input_shapes, chosen.freeze, seen)
        say = None if progress is None else (lambda line: progress("tune", 0, 0, line))
        return tune_hosts(graph, chosen, say)
    from autopart.tuning.workflow import tune_model  # optuna and scipy load on first use

    return tune_model(model, chosen, progress=progress)


def bench(
    models: str | Sequence[str],
    options: BenchOptions | None = None,
    *,
    progress: StageProgress | None = None,
    **fields: Any,
) -> pd.DataFrame:
    """Time every way of running ``models`` side by side (``autopart bench MODEL...``).

    For each model: onnxruntime alone, every single target, the peer baselines and the
    tuned plan (the one ``tune`` saved, else the search's pick now) run in interleaved
    rounds on the same inputs; with ``baselines=False``, only the peers and the tuned plan
    (each target is then profiled only as far as the tune needs). Options are the fields
    of :class:`BenchOptions` (targets, rounds, baselines, search_dir, profiles_dir,
    input_shapes, freeze, memory_limit, dataset, validation_split, metric, max_drop: as
    :func:`tune`'s) and of its ``search`` (precision, tolerance, ...), as ``options`` or
    flat keywords (keywords win), e.g.
    ``bench(["vad.onnx"], input_shapes={"batch": 1}, precision="f32")``. Returns one row
    per (model, plan), with the columns :func:`autopart.tuning.bench.bench_models` lists.
    """
    from autopart.tuning.bench import bench_models  # onnxruntime loads on first use

    chosen = (options or BenchOptions()).updated(**fields)
    names = [models] if isinstance(models, str) else list(models)
    return bench_models(names, chosen, progress=progress)
