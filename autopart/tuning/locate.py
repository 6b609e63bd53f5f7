"""Where a tune works, fixed before anything is measured: the model, targets and folder.

:func:`locate` loads the model, chooses the targets (those given, else every one this
machine offers in the precisions allowed, or the given profile's), makes the search
folder ``search_dir/<model>-<targets hash>/`` and checks the study storage, so that a
tune fails on what it cannot write before it measures anything.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autopart.costmodel import profile_targets
from autopart.errors import AutopartError, ModelError
from autopart.io import check_writable
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.loader import ModelLike, load_model
from autopart.profile import Profile
from autopart.progress import StageProgress
from autopart.search.constraints import Constraints
from autopart.search.optuna_study import check_storage
from autopart.targets.devices import discover
from autopart.targets.resolve import available_targets
from autopart.tuning.judge import Judge, dataset_shapes, task_judge
from autopart.tuning.metrics import metric_for, parse_metric
from autopart.tuning.options import ModelOptions, TuneOptions


def targets_key(targets: Sequence[str]) -> str:
    """A short stable hash naming a target set."""
    return hashlib.sha256(",".join(sorted(targets)).encode()).hexdigest()[:8]


def with_fallback(
    targets: Sequence[str] | None, constraints: Constraints | None
) -> list[str] | None:
    """``targets`` and, when it is not among them, the constraints' fallback target."""
    if not targets:
        return None
    chosen = list(targets)
    fallback = constraints.fallback if constraints is not None else None
    if fallback is not None and fallback not in chosen:
        chosen.append(fallback)
    return chosen


@dataclass
class Located:
    """A loaded model and where its tune works, fixed before anything is measured.

    ``targets`` are the target specs chosen; ``directory`` the search folder
    (``search_dir/<model>-<targets hash>/``, made); ``storage`` the study's RDB URL;
    ``given`` the profile of ``options.profile_file`` when one was given, and
    ``planned_only`` whether it is another machine's (nothing runs). ``judge`` judges the
    plans' outputs (:func:`judge_of`); int8's calibration samples are attached to ``graph``.
    """

    graph: Graph
    targets: list[str]
    directory: Path
    storage: str
    given: Profile | None
    planned_only: bool
    judge: Judge


def judge_of(graph: Graph, options: ModelOptions) -> Judge:
    """The judge of a tune or bench of ``graph`` with ``options``' samples and metric.

    The metric asked, else the default for the samples given
    (:func:`~autopart.tuning.metrics.metric_for`); max-rel where ``--tolerance``, its
    budget, is given.
    """
    asked = parse_metric(options.metric)
    answers = options.dataset is not None and options.search.tolerance is None
    metric = metric_for(graph, asked, real_samples=answers)
    return task_judge(graph, options.dataset, metric, options.validation_split, options.search.seed)


def locate(
    model: ModelLike, options: TuneOptions | None = None, progress: StageProgress | None = None
) -> Located:
    """Load ``model`` and fix its targets, search folder and study storage (see :class:`Located`).

    ``progress`` hears of the import (an ``import`` stage), which takes seconds on models
    of tens of thousands of nodes.

    The search folder is made, and when the search will use optuna the study database in
    it is opened and read (:func:`~autopart.search.optuna_study.check_storage`), so that a
    damaged or read-only study fails before anything is measured (:func:`tune_model`
    checks a storage given in ``options`` before loading the model).
    """
    options = options or TuneOptions()
    if progress is not None and not isinstance(model, Graph):
        named = Path(model).name if isinstance(model, str | Path) else "the model"
        progress("import", 0, 0, f"importing {named}")
    seen = None if options.dataset is None else dataset_shapes(options.dataset)
    graph = load_model(model, options.input_shapes, options.freeze, seen)
    if not graph.nodes:
        raise ModelError(
            f"{graph.name} has no nodes (its outputs are its inputs): there is nothing to tune"
        )
    judge = judge_of(graph, options)
    machine = discover()
    targets = with_fallback(options.targets, options.search.constraints)
    policy = options.accuracy_policy
    for text in targets or []:
        precision = VirtualDevice.parse(text).computes_in
        if not policy.allows(precision):
            raise AutopartError(
                f"target {text} computes in {precision}, which --precision "
                f"{'+'.join(policy.precisions or ())} does not allow"
            )
    given = None if options.profile_file is None else Profile.load(options.profile_file)
    if given is not None:
        chosen = list(targets or []) or [
            str(t) for t in profile_targets(given) if policy.allows(t.computes_in)
        ]
    else:
        chosen = list(targets or []) or [
            str(t) for t in available_targets(machine, policy.precisions)
        ]
    name = Path(str(graph.meta.get("source", graph.name))).name.removesuffix(".onnx")
    directory = Path(options.search_dir) / f"{name}-{targets_key(chosen)}"
    check_writable(directory, "search folder", directory=True)
    directory.mkdir(parents=True, exist_ok=True)
    storage = options.search.storage or f"sqlite:///{directory / 'study.db'}"
    given_storage = options.search.storage is not None  # checked before loading the model
    if options.search.uses_optuna and not given_storage:
        check_storage(storage)
    planned_only = given is not None and given.fingerprint != machine.fingerprint()
    return Located(graph, chosen, directory, storage, given, planned_only, judge)
