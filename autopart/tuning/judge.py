"""What a plan's outputs are judged on, and how: the samples, the metric and the reference.

A tune and a benchmark judge every runner (plan or peer) by a task metric
(:mod:`autopart.tuning.metrics`) on the *validation* samples, against the numpy reference's
outputs (f32) on the same samples, computed once and kept here. The samples are the
user's (``--inputs``, the API's ``dataset=``: an ``.npz`` with a leading sample axis, a
folder of ``.npz`` files, or any iterable of feeds), split by a seeded shuffle into
calibration samples (int8's ranges, :mod:`autopart.targets.quant_ranges`) and validation
samples (``--validation-split``, the share validated; half by default). Without samples,
seeded random inputs stand in, and every line that reports accuracy says so
(:meth:`Judge.describe`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autopart.errors import InputError
from autopart.io import tensor_shapes
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.runtime.executor import Executor
from autopart.settings import COMMON
from autopart.targets import quant_ranges
from autopart.tuning.finite import check_reference_finite
from autopart.tuning.metrics import MAX_REL, Metric, Outputs, Tally
from autopart.tuning.oracle import least_error_order
from autopart.tuning.settings import ACCURACY

Feeds = dict[str, np.ndarray]
Dataset = str | Path | Iterable[Mapping[str, np.ndarray]]


@dataclass
class Judge:
    """How runners' outputs are judged: ``metric`` over ``samples``, against the reference.

    ``samples`` are the validation samples (``real``: the user's; else seeded random
    inputs); ``feeds_judged`` says the timing feeds count as one more sample (random
    inputs: they are no less a sample than the others); ``given`` and ``calibrated`` count
    the samples given and those int8 was calibrated on. The reference's outputs on each
    sample are computed on first use and kept.
    """

    graph: Graph
    metric: Metric = field(default_factory=lambda: Metric(MAX_REL))
    samples: Sequence[Feeds] = ()
    real: bool = False
    given: int = 0
    calibrated: int = 0
    _references: dict[int, Outputs] = field(default_factory=dict, repr=False)
    _executor: Executor | None = field(default=None, repr=False)  # compiled once, run per sample

    @property
    def feeds_judged(self) -> bool:
        """Whether the timing feeds are judged too (random inputs only)."""
        return not self.real

    def reference(self, index: int) -> Outputs:
        """The numpy reference's outputs on sample ``index``, computed once.

        Raises :class:`~autopart.errors.InputError` when they are not finite
        (:func:`~autopart.tuning.finite.check_reference_finite`).
        """
        if index not in self._references:
            if self._executor is None:
                self._executor = Executor(self.graph)
            outputs = self._executor.run(self.samples[index]).outputs
            where = f"validation sample {index}" if self.real else "an evaluation sample"
            check_reference_finite(self.graph, outputs, where)
            self._references[index] = outputs
        return self._references[index]

    def tally(self, reference: Outputs, outputs: Outputs) -> tuple[Tally, float]:
        """One sample's tally on the metric, and its largest relative error beside it.

        Both are taken on ``outputs`` as :func:`lined_up` puts them: rows of a sorted score
        that are tied within the check's tolerance may line up with the reference's first,
        so that a detector's boxes of equal score, kept in another order, are no error.
        """
        outputs, rel = lined_up(reference, outputs)
        if self.metric.name == MAX_REL and not self.metric.outputs:
            return (rel, 0.0), rel
        return self.metric.tally(reference, outputs), rel

    def drop(self, tallies: Sequence[Tally]) -> float:
        """The metric's drop over ``tallies`` (see :meth:`~autopart.tuning.metrics.Metric.drop`)."""
        return self.metric.drop(tallies)

    def describe(self) -> str:
        """What the metric is measured on: ``8 validation samples of 16 given``, or random."""
        count = len(self.samples) + (1 if self.feeds_judged else 0)
        if not self.real:
            return f"{count} seeded random inputs (no --inputs given)"
        calibrated = f", {self.calibrated} calibrating int8" if self.calibrated else ""
        return f"{count} validation samples of {self.given} given{calibrated}"

    def screen(self) -> Judge:
        """The judge of the screen: the validation samples if real, else the feeds alone."""
        if self.real:
            return self
        return Judge(self.graph, self.metric)


def lined_up(reference: Outputs, outputs: Outputs) -> tuple[Outputs, float]:
    """``outputs``, or them with rows moved within ties where that lowers the error; its error.

    The error is the largest relative error of any output (``max-rel``); ties are runs of a
    sorted score within ``COMMON.check_tolerance``
    (:func:`~autopart.tuning.oracle.least_error_order`).
    """
    lined, _, error = least_error_order(outputs, reference, COMMON.check_tolerance)
    return lined, error


def evaluation_samples(graph: Graph, seed: int) -> list[Feeds]:
    """The seeded random inputs judged besides the timing feeds (seeded ``seed``)."""
    count = ACCURACY.evaluation_samples
    return [random_inputs(graph, seed + 1 + index) for index in range(count)]


def random_judge(graph: Graph, metric: Metric, seed: int) -> Judge:
    """A judge on seeded random inputs: the timing feeds and :func:`evaluation_samples`."""
    return Judge(graph, metric, evaluation_samples(graph, seed))


def split_samples(
    samples: Sequence[Feeds], validation_split: float, seed: int
) -> tuple[list[Feeds], list[Feeds]]:
    """(calibration, validation): a seeded shuffle of ``samples``, the validated share last.

    At least one sample is validated; with one sample alone, it validates and nothing
    calibrates. Raises :class:`InputError` for a split outside (0, 1].
    """
    check_validation_split(validation_split)
    order = np.random.default_rng(seed).permutation(len(samples))
    validated = min(len(samples), max(1, math.ceil(validation_split * len(samples))))
    if len(samples) == 1:
        return [], list(samples)
    cut = len(samples) - validated
    return [samples[i] for i in order[:cut]], [samples[i] for i in order[cut:]]


def check_validation_split(share: float) -> None:
    """Raise :class:`InputError` unless ``share`` is a number in (0, 1]."""
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        raise InputError(
            f"--validation-split must be the share of samples validated, above 0 and at "
            f"most 1, not {share}"
        )


def dataset_shapes(dataset: Dataset) -> dict[str, tuple[int, ...]]:
    """The array shapes of ``dataset``'s first file or sample, by input name.

    What fixes a model's symbolic input dims when the user gives samples and no
    ``--input-shape`` (:func:`~autopart.ir.input_shapes.shapes_from_samples`). An array
    may carry a leading sample axis; a file's shapes are read from its headers (its data is
    read and checked once, with the samples). Raises :class:`InputError` for an unreadable
    file or an empty folder or dataset.
    """
    if isinstance(dataset, str | Path):
        path = Path(dataset)
        files = sorted(path.glob("*.npz")) if path.is_dir() else [path]
        if not files:
            raise InputError(f"the folder {path} holds no .npz file of inputs")
        return tensor_shapes(files[0])
    first = next(iter(dataset), None)
    if first is None:
        raise InputError("the dataset holds no sample")
    return {name: np.shape(array) for name, array in first.items()}


def load_dataset(dataset: Dataset, graph: Graph) -> list[Feeds]:
    """The samples of ``dataset``, each checked against ``graph``'s inputs.

    A path is read by :func:`~autopart.targets.quant_ranges.load_samples`; an iterable
    gives feeds by input name, each cast to its input's dtype. Raises :class:`InputError`
    for no sample, a sample missing an input, or an array whose shape does not fit.
    """
    if isinstance(dataset, str | Path):
        return quant_ranges.load_samples(dataset, graph)
    samples = []
    for index, sample in enumerate(dataset):
        missing = [name for name in graph.inputs if name not in sample]
        if missing:
            raise InputError(f"dataset sample {index} has no input {missing[0]!r}")
        feeds = {name: np.asarray(sample[name]) for name in graph.inputs}
        for name, array in feeds.items():
            declared = graph.value(name).shape
            if not quant_ranges.fits_shape(array.shape, declared):
                raise InputError(
                    f"dataset sample {index}: input {name!r} has shape {list(array.shape)}, "
                    f"expected {list(declared or [])}"
                )
            wanted = graph.value(name).dtype
            if wanted is not None and array.dtype != wanted:
                feeds[name] = array.astype(wanted)
        samples.append(feeds)
    if not samples:
        raise InputError("the dataset holds no sample")
    return samples


def task_judge(
    graph: Graph,
    dataset: Dataset | None,
    metric: Metric,
    validation_split: float,
    seed: int,
) -> Judge:
    """The judge of a tune or bench of ``graph``; int8's calibration attached to ``graph``.

    With a ``dataset``, its samples split into calibration (attached,
    :func:`~autopart.targets.quant_ranges.attach`) and validation; without, seeded random
    inputs (:func:`random_judge`) and random calibration samples stand in.
    """
    if dataset is None:
        return random_judge(graph, metric, seed)
    samples = load_dataset(dataset, graph)
    calibration, validation = split_samples(samples, validation_split, seed)
    if calibration:
        quant_ranges.attach(graph, quant_ranges.CalibrationSamples(tuple(calibration), False))
    return Judge(graph, metric, validation, True, len(samples), len(calibration))
