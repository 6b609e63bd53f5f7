"""Task metrics: how far a plan's outputs move the model's answers from the f32 reference.

A metric turns each sample's outputs, beside the reference's on the same sample, into a
tally, and the tallies of every sample into a *drop*: 0 where the outputs are the
reference's, larger the more they moved. A plan is held to a budget on the drop
(``--max-drop``; ``--tolerance`` is the budget of ``max-rel``).

- ``max-rel``: the largest relative error of any output, over every sample (the check
  of :func:`~autopart.tuning.oracle.relative_error`).
- ``agreement``: the share of answers changed. An answer is the argmax along the score
  axis of a score-like output (:func:`score_outputs`; the score axis is its last axis
  longer than 1, :func:`score_axis`), one per position of its other axes.
- ``topk:K``: the share of answers whose reference argmax is not among the plan's K
  highest scores.
- ``cosine``: 1 minus the least cosine similarity of an output with the reference's.
- ``snr-db``: the noise-to-signal power ratio over every output and sample; shown as a
  signal-to-noise ratio in dB, and budgeted as the ratio (``1e-3`` is 30 dB).
- a callable ``score(reference, outputs) -> float`` (the API's ``metric=``), higher is
  better: the drop is its mean score of the reference against itself minus its mean score.

Outputs of another shape than the reference's (a detector that keeps another number of
boxes) change every answer they hold.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from autopart.errors import InputError
from autopart.ir.graph import Graph, Value
from autopart.tuning.oracle import relative_error

Outputs = Mapping[str, np.ndarray]
Tally = tuple[float, float]  # a sample's contribution, summed or reduced by the metric
ScoreFunction = Callable[[Outputs, Outputs], float]

MAX_REL, AGREEMENT, TOPK, COSINE, SNR_DB = "max-rel", "agreement", "topk", "cosine", "snr-db"
METRIC_NAMES = (AGREEMENT, f"{TOPK}:K", COSINE, SNR_DB, MAX_REL)
# The default budgets: a drop the user did not ask to bound. agreement and topk keep 99%
# of the answers (the default); cosine and snr-db keep outputs within rounding of a
# few bf16 steps (bf16 holds 8 significant bits: 2**-8 relative noise is 48 dB).
DEFAULT_BUDGETS = {AGREEMENT: 0.01, TOPK: 0.01, COSINE: 1e-3, SNR_DB: 1e-3}
# Ops whose output is a row of scores, or whose last axis a head reads scores along.
SCORE_OPS = frozenset({"Softmax", "LogSoftmax", "Gemm", "MatMul"})
# Ops that move or retype a tensor without computing: a score head's output may pass them.
PASSING_OPS = frozenset(
    {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast", "Add", "Transpose"}
)


@dataclass(frozen=True)
class Metric:
    """One task metric (see the module): its ``name``, what it reads and its default budget.

    ``outputs`` are the outputs it judges (empty: every output). ``k`` is ``topk``'s K;
    ``score`` a user's score function. :meth:`tally` reads one sample, :meth:`drop` all of
    them; both take outputs by name as the model gives them.
    """

    name: str
    outputs: tuple[str, ...] = ()
    k: int = 1
    score: ScoreFunction | None = None

    @property
    def default_budget(self) -> float | None:
        """The drop allowed when none is given (None: ``max-rel``'s tolerance rule)."""
        return DEFAULT_BUDGETS.get(self.name)

    @property
    def label(self) -> str:
        """The metric as the user names it: ``topk:5``, ``agreement``, ``custom``."""
        return f"{TOPK}:{self.k}" if self.name == TOPK else self.name

    def _judged(self, reference: Outputs) -> list[str]:
        return [name for name in reference if not self.outputs or name in self.outputs]

    def tally(self, reference: Outputs, outputs: Outputs) -> Tally:
        """One sample's contribution: (largest error, 0), (changed, answers) or sums."""
        names = self._judged(reference)
        got = {name: np.asarray(outputs[name]) for name in names}
        want = {name: np.asarray(reference[name]) for name in names}
        if self.score is not None:
            return float(self.score(want, got)), float(self.score(want, want))
        if self.name == MAX_REL:
            return max([relative_error(got[n], want[n]) for n in names], default=0.0), 0.0
        if self.name in (AGREEMENT, TOPK):
            return _answers(want, got, self.k if self.name == TOPK else 1)
        if self.name == COSINE:
            return min([_cosine(got[n], want[n]) for n in names], default=1.0), 0.0
        return _noise_and_signal(want, got)

    def drop(self, tallies: Sequence[Tally]) -> float:
        """The drop over every sample's tally: 0 with no tally, ``inf`` where none is finite."""
        if not tallies:
            return 0.0
        first, second = (np.array([t[i] for t in tallies], dtype=np.float64) for i in (0, 1))
        if self.score is not None:
            return float(second.mean() - first.mean())
        if self.name == MAX_REL:
            return float(first.max())
        if self.name == COSINE:
            return max(0.0, float(1.0 - first.min())) if np.isfinite(first).all() else math.inf
        total = float(second.sum())
        if self.name == SNR_DB:
            noise = float(first.sum())
            return noise / total if total > 0 else (0.0 if noise == 0 else math.inf)
        return float(first.sum()) / total if total > 0 else 0.0

    def short(self, drop: float) -> str:
        """The drop in a table cell: ``0.4%`` of answers, ``41.2 dB``, else ``1.3e-03``."""
        if self.name in (AGREEMENT, TOPK):
            return f"{drop:.1%}"
        if self.name == SNR_DB:
            return f"{snr_db(drop):.1f} dB"
        return f"{drop:.1e}"

    def describe(self, drop: float) -> str:
        """The drop as a user reads it: ``1.3% of answers changed``, ``SNR 41.2 dB``."""
        if self.name in (AGREEMENT, TOPK):
            return f"{drop:.1%} of answers changed"
        if self.name == SNR_DB:
            return f"SNR {snr_db(drop):.1f} dB"
        if self.name == COSINE:
            return f"cosine {1.0 - drop:.5f}"
        if self.name == MAX_REL:
            return f"error {drop:.3g}"
        return f"{self.label} drop {drop:.3g}"


def snr_db(ratio: float) -> float:
    """A noise-to-signal power ratio as a signal-to-noise ratio in dB (``inf`` at 0)."""
    return math.inf if ratio <= 0 else -10.0 * math.log10(ratio)


def _answers(reference: Outputs, outputs: Outputs, k: int) -> Tally:
    """(answers changed, answers) over the outputs: the reference's argmax not in the top k."""
    changed = total = 0
    for name, want in reference.items():
        got, axis = outputs[name], score_axis(want.shape)
        if axis is None:
            continue
        answers = int(want.size // want.shape[axis])
        total += answers
        if got.shape != want.shape or not np.isfinite(got).all():
            changed += answers
            continue
        expected = np.argmax(np.moveaxis(want, axis, -1).reshape(answers, -1), axis=-1)
        rows = np.moveaxis(got, axis, -1).reshape(answers, -1).astype(np.float64)
        if k == 1:
            kept = np.argmax(rows, axis=-1) == expected
        else:
            bar = np.sort(rows, axis=-1)[:, -min(k, rows.shape[-1])]
            kept = rows[np.arange(answers), expected] >= bar
        changed += int(answers - kept.sum())
    return float(changed), float(total)


def score_axis(shape: Sequence[object]) -> int | None:
    """The axis scores lie along: the last one longer than 1 (None: no such static axis).

    ``(1, 1000)`` and ``(1, 1000, 1, 1)`` hold 1,000 scores along axis 1; ``(1, 8, 50)``
    holds 8 rows of 50.
    """
    longer = [i for i, dim in enumerate(shape) if isinstance(dim, int | np.integer) and dim > 1]
    return longer[-1] if longer else None


def _cosine(got: np.ndarray, want: np.ndarray) -> float:
    """The cosine similarity of two outputs (1 for two all-zero ones, 0 for unlike shapes)."""
    if got.shape != want.shape:
        return 0.0
    a, b = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    if np.array_equal(a, b):
        return 1.0
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return 0.0 if not np.array_equal(a, b, equal_nan=True) else 1.0
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    if norms == 0:
        return 1.0 if not a.any() and not b.any() else 0.0
    return float(np.dot(a, b) / norms)


def _noise_and_signal(reference: Outputs, outputs: Outputs) -> Tally:
    """(noise power, signal power) summed over the outputs; unlike shapes are all noise."""
    noise = signal = 0.0
    for name, want in reference.items():
        expected = want.astype(np.float64)
        signal += float(np.sum(expected**2))
        got = outputs[name]
        if got.shape != want.shape:
            noise += math.inf
            continue
        noise += float(np.sum((got.astype(np.float64) - expected) ** 2))
    return noise, signal


def score_outputs(graph: Graph) -> tuple[str, ...]:
    """The outputs of ``graph`` that look like scores or logits; empty unless every one does.

    An output looks like scores when it is a float tensor of at least two scores along an
    axis (:func:`score_axis`), made by a score head (:data:`SCORE_OPS`: a softmax, or a
    matrix product whose last axis is the classes), possibly through ops that only move
    it (:data:`PASSING_OPS`). A convolution's output is a feature map, whose axes are
    channels and pixels, not answers: it does not look like scores.
    """
    found = []
    for name in graph.outputs:
        value = graph.values.get(name)
        if value is None or not _rows_of_scores(value):
            return ()
        node = value.producer
        while node is not None and node.op_type in PASSING_OPS and node.inputs:
            source = graph.values.get(node.inputs[0])
            node = None if source is None else source.producer
        if node is None or node.op_type not in SCORE_OPS:
            return ()
        found.append(name)
    return tuple(found)


def _rows_of_scores(value: Value) -> bool:
    """Whether ``value`` is a float tensor with a score axis (:func:`score_axis`)."""
    return (
        value.dtype is not None
        and np.issubdtype(value.dtype, np.floating)
        and value.shape is not None
        and score_axis(value.shape) is not None
    )


def parse_metric(spec: str | ScoreFunction | None) -> Metric | None:
    """The metric a user names (None: the default, chosen per model by :func:`metric_for`).

    ``agreement``, ``topk:K`` (K a whole number from 1), ``cosine``, ``snr-db``,
    ``max-rel``, or a callable score. Raises :class:`InputError` for any other name.
    """
    if spec is None:
        return None
    if callable(spec):
        return Metric("custom", score=spec)
    text = spec.strip().lower()
    if text in (MAX_REL, AGREEMENT, COSINE, SNR_DB):
        return Metric(text)
    head, _, tail = text.partition(":")
    if head == TOPK and tail.isdigit() and int(tail) >= 1:
        return Metric(TOPK, k=int(tail))
    raise InputError(f"unknown metric {spec!r}: use one of {', '.join(METRIC_NAMES)}")


def metric_for(graph: Graph, asked: Metric | None, real_samples: bool) -> Metric:
    """The metric a tune judges ``graph``'s plans by.

    The one ``asked`` (``agreement`` and ``topk`` read the score-like outputs where there
    are some, else every float output with a score axis). By default,
    ``agreement`` where the samples are the user's (``real_samples``) and every output
    looks like scores (:func:`score_outputs`); else ``max-rel``: random inputs give no
    task's answers to keep. Raises :class:`InputError` when ``agreement`` or ``topk`` is
    asked of a model with no output to take answers from.
    """
    scores = score_outputs(graph)
    if asked is None:
        return Metric(AGREEMENT, scores) if real_samples and scores else Metric(MAX_REL)
    if asked.name not in (AGREEMENT, TOPK) or scores:
        return Metric(asked.name, scores, asked.k, asked.score)
    rows = tuple(
        name for name in graph.outputs if (v := graph.values.get(name)) and _rows_of_scores(v)
    )
    if not rows:
        raise InputError(
            f"--metric {asked.label}: no float output of the model has an axis of scores "
            "to take answers from; use cosine, snr-db or max-rel"
        )
    return Metric(asked.name, rows, asked.k, asked.score)
