"""Subgraph calibration: correcting op sums by what whole windows of the model really cost.

Graph codegens such as onnxruntime fuse inside a partition (a Conv absorbs its Relu), and
every codegen runs a chain of ops with warmer caches than one op alone; so the sum of one-op
timings can be wrong for a partition. The profiler therefore times a few contiguous windows
of the topological order on every target (never the whole model, so that whole-model
predictions stay an honest check) and stores each as a ``calibration`` row: ``median_s`` is
the window's measured ``run_timed`` time and ``predicted_s`` what the op sum predicted for it.

A target's factor is the median over its windows of
``(measured - base) / (predicted - base)``, where ``base`` is the launch probe's own timed
entry (wall-clock codegens) or 0 (device clocks). It is applied only when the windows
agree: at least two, all on one side of 1, and either the largest ratio within 1.5x of the
smallest or every window's op sum off by more than half (a transformer encoder's windows on
one onnxruntime unit measured 0.13-0.28x their op sums: 2x apart, all saying the same). On
a shared machine a window timed during a few seconds of host slow-down says nothing about
fusion or caches, and one-op timings are then the better guide (see
``experiments/bench_profile_accuracy.py``). So by default (:data:`DEFAULT_MODE`,
``"gross"``) costs are scaled only where the agreeing windows put the op sum off by more
than half: beyond what timing noise does on this machine (a second measurement of a whole
model differs by 4-8% at the median, 30% at worst), and what a graph of tiny ops does (a
transformer encoder's one-op sessions on onnxruntime cost 2-4x what the same nodes take
inside one session). Windows of the model being planned are used when the profile has them;
otherwise the windows of every other model measured on that target; otherwise the factor
is 1.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pandas as pd

from autopart.costmodel.measurements import MeasurementTable, RowKind
from autopart.costmodel.op_costs import OpCosts, op_costs
from autopart.ir.graph import Graph, Node
from autopart.ir.hashing import graph_hash
from autopart.settings import tuned


@dataclass(frozen=True)
class CalibrationSettings:
    """When measured subgraph windows rescale op sums (costmodel.calibration)."""

    min_nodes: int = tuned(12, "models with fewer nodes get no calibration windows")
    max_window: int = tuned(40, "at most this many nodes per calibration window")
    centres: tuple[float, ...] = tuned(
        (1 / 6, 1 / 2, 5 / 6), "where the windows sit: the start, middle and end of the node order"
    )
    factor_range: tuple[float, float] = tuned(
        (0.2, 5.0), "calibration factors are clipped to this range"
    )
    agreement: float = tuned(
        1.5, "windows whose factors differ by more than this ratio disagree, and give no factor"
    )
    gross_error: float = tuned(
        0.5,
        "scale only where the op sum is off by more than half: a second measurement of a "
        "whole model differs by 4-8% at the median, 30% at worst "
        "(experiments/exp_calibration_variants.py)",
    )


CALIBRATION = CalibrationSettings()
MODES = ("off", "gross", "on")
DEFAULT_MODE = "gross"


@dataclass(frozen=True)
class WindowFactor:
    """A target's fitted factor, the windows behind it and how wrong the op sum was on them.

    ``source`` is ``"model"`` (windows of the planned model), ``"other models"`` or
    ``"none"`` (no windows: factor 1). ``op_sum_error`` is the median over the windows of
    ``predicted / measured - 1`` (0 without windows). ``applied`` says whether the windows
    agreed, so that ``factor`` is their median ratio rather than 1.
    """

    target: str
    factor: float
    windows: int
    source: str
    op_sum_error: float
    applied: bool = False

    @property
    def gross(self) -> bool:
        """Whether the windows agree and put the op sum off by over ``CALIBRATION.gross_error``."""
        return self.applied and abs(self.op_sum_error) > CALIBRATION.gross_error

    def factor_for(self, mode: str) -> float:
        """The factor a search uses under ``mode``, one of :data:`MODES`.

        ``"off"``: always 1; ``"gross"``: the factor where :attr:`gross`, else 1; ``"on"``:
        the factor wherever the windows agree. Raises ``ValueError`` for another mode.
        """
        if mode not in MODES:
            raise ValueError(f"unknown calibration mode {mode!r}; use one of {', '.join(MODES)}")
        if mode == "on" or (mode == "gross" and self.gross):
            return self.factor
        return 1.0


def model_tag(graph: Graph) -> str:
    """The part of a window key naming the model: its name and a prefix of its hash."""
    return f"{graph.name}@{graph_hash(graph)[:12]}"


def own_rows_first(rows: pd.DataFrame, graph: Graph) -> tuple[pd.DataFrame, bool]:
    """The rows of ``graph``'s own windows if there are any, else all ``rows``.

    The flag says whether they are the model's own.
    """
    own = rows[rows["key"].str.startswith(model_tag(graph) + "[")]
    return (own, True) if len(own) else (rows, False)


def window_key(graph: Graph, start: int, end: int) -> str:
    """The calibration row key of the window ``graph.nodes[start:end]``."""
    return f"{model_tag(graph)}[{start}:{end}]"


def calibration_windows(graph: Graph, supported: Callable[[Node], bool]) -> list[tuple[int, int]]:
    """Up to three disjoint windows ``(start, end)`` of the topological order to time.

    Each window holds about an eighth of the nodes (2 to 40), sits as near as it can to a
    sixth, a half and five sixths of the order, and holds only ``supported`` nodes. Graphs
    under 12 nodes get no windows.
    """
    nodes = graph.nodes
    count = len(nodes)
    if count < CALIBRATION.min_nodes:
        return []
    width = min(max(count // 8, 2), CALIBRATION.max_window)
    known: dict[int, bool] = {}  # asked lazily: a window near its centre is usually found

    def ok(index: int) -> bool:
        if index not in known:
            known[index] = supported(nodes[index])
        return known[index]

    windows: list[tuple[int, int]] = []
    for centre in CALIBRATION.centres:
        wanted = round(centre * count - width / 2)
        for start in _nearest_first(wanted, count - width + 1):
            end = start + width
            clear = all(end <= s or start >= e for s, e in windows)
            if clear and all(ok(i) for i in range(start, end)):
                windows.append((start, end))
                break
    return sorted(windows)


def _nearest_first(wanted: int, count: int) -> Iterator[int]:
    """``0 .. count - 1`` by distance from ``wanted``, the lower first on a tie."""
    wanted = min(max(wanted, 0), count - 1)
    yield wanted
    for step in range(1, count):
        for start in (wanted - step, wanted + step):
            if 0 <= start < count:
                yield start


def op_sum(
    profile: MeasurementTable,
    graph: Graph,
    nodes: Sequence[Node],
    target: str,
    costs: OpCosts | None = None,
) -> float | None:
    """What the op costs predict ``run_timed`` reports for ``nodes`` run as one subgraph.

    ``costs`` are the graph's op costs on ``target`` when already known. ``None`` when an
    op or the launch probe is not in the profile.
    """
    timed = profile.measurement(RowKind.LAUNCH, target, "timed")
    if timed is None:
        return None
    if costs is None:
        costs = op_costs(profile, graph, target, timed.median_s)
    names = {node.name for node in nodes}
    if any(node.name in names for node in costs.missing):
        return None
    total = sum(costs.seconds.get(name, 0.0) for name in names)
    return total + (timed.median_s if timed.timer == "wall" else 0.0)


def calibration_rows(
    profile: MeasurementTable, graph: Graph, target: str
) -> tuple[pd.DataFrame, bool]:
    """``target``'s calibration windows with a prediction, and whether they are ``graph``'s own.

    The model's own windows where the profile has any (:func:`own_rows_first`), else every
    model's; the flag is false when there are none.
    """
    rows = profile.rows(RowKind.CALIBRATION, target)
    rows = rows[rows["predicted_s"].notna()]
    return own_rows_first(rows, graph) if len(rows) else (rows, False)


def calibrate(
    profile: MeasurementTable, graph: Graph, target: str, costs: OpCosts | None = None
) -> WindowFactor:
    """The factor by which op costs of ``graph`` on ``target`` are scaled, and its basis.

    ``costs`` are the graph's op costs on ``target`` when the caller already has them.
    """
    rows, own = calibration_rows(profile, graph, target)
    source = ("model" if own else "other models") if len(rows) else "none"
    timed = profile.measurement(RowKind.LAUNCH, target, "timed")
    ratios, errors = [], []
    for row in rows.itertuples(index=False):
        if timed is None:
            break
        base = timed.median_s if str(row.timer) == "wall" else 0.0
        reference = float(row.predicted_s)
        if source == "model":  # the op costs may have changed since: predict afresh
            if costs is None:
                costs = op_costs(profile, graph, target, timed.median_s)
            start, end = window_bounds(str(row.key))
            window = graph.nodes[start:end]
            reference = op_sum(profile, graph, window, target, costs) or reference
        measured = float(row.median_s) - base
        predicted = reference - base
        if measured > 0.0 and predicted > 0.0:
            ratios.append(measured / predicted)
            errors.append(predicted / measured - 1)
    if not ratios:
        return WindowFactor(target, 1.0, 0, "none", 0.0)
    low, high = CALIBRATION.factor_range
    one_side = len(ratios) >= 2 and (min(ratios) >= 1.0 or max(ratios) <= 1.0)
    close = max(ratios) <= CALIBRATION.agreement * min(ratios)
    agree = one_side and (close or min(abs(error) for error in errors) > CALIBRATION.gross_error)
    factor = min(max(statistics.median(ratios), low), high) if agree else 1.0
    return WindowFactor(target, factor, len(ratios), source, statistics.median(errors), agree)


def window_bounds(key: str) -> tuple[int, int]:
    """The node range ``(start, end)`` a calibration window key names."""
    start, end = key.rsplit("[", 1)[1].rstrip("]").split(":")
    return int(start), int(end)
