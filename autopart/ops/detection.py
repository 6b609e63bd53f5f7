"""Reference kernel for NonMaxSuppression."""

from __future__ import annotations

import numpy as np

from autopart.ops.registry import register


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """Boxes as (y_min, x_min, y_max, x_max) from corner pairs or (x, y, w, h) centres."""
    boxes = boxes.astype(np.float64)
    if center_point_box:
        x, y, w, h = boxes.T
        return np.stack([y - h / 2, x - w / 2, y + h / 2, x + w / 2], axis=1)
    y1, x1, y2, x2 = boxes.T
    return np.stack(
        [np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=1
    )


PAIRS_PER_STEP = 200  # pairs tested at once cost about as much as one greedy step
PAIR_CHUNK = 1 << 20  # pairs of boxes tested at once: bounds the memory, not the result


def _overlaps(boxes: np.ndarray, others: np.ndarray, threshold: float) -> np.ndarray:
    """Whether the IoU of each of ``boxes`` with each of ``others`` exceeds ``threshold``.

    Row by row, or one box (a single row) against every other: numpy broadcasting.
    """
    low = np.maximum(boxes[:, :2], others[:, :2])
    high = np.minimum(boxes[:, 2:], others[:, 2:])
    sides = high - low
    inter = np.where((sides > 0).all(axis=1), sides.prod(axis=1), 0.0)
    area = (boxes[:, 2:] - boxes[:, :2]).prod(axis=1)
    areas = (others[:, 2:] - others[:, :2]).prod(axis=1)
    return _exceeds(inter, area, areas, threshold)


def _exceeds(
    inter: np.ndarray, area: np.ndarray, areas: np.ndarray, threshold: float
) -> np.ndarray:
    """Whether intersections ``inter`` of boxes of ``area`` and ``areas`` pass ``threshold``."""
    union = area + areas - inter
    valid = (inter > 0) & (area > 0) & (areas > 0) & (union > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return valid & (inter / np.where(union > 0, union, 1) > threshold)


def _select(
    corners: np.ndarray, scores: np.ndarray, limit: int, iou: float, floor: float | None
) -> list[int]:
    """Greedy selection: highest score first (lower index on ties), skipping overlaps.

    Two exact ways, chosen by their cost: where the boxes whose spans across x meet are few
    against the steps a greedy pass would take (:data:`PAIRS_PER_STEP`), every such pair
    is tested at once and the pass only reads the result (:func:`_select_by_pairs`);
    otherwise each box chosen tests its neighbours (:func:`_select_stepwise`).
    """
    candidates = np.arange(len(scores)) if floor is None else np.flatnonzero(scores > floor)
    order = candidates[np.lexsort((candidates, -scores[candidates]))]
    ordered = corners[order]
    if limit <= 0 or len(order) == 0:
        return []
    sweep = _XSweep(ordered)
    if sweep.pairs <= PAIRS_PER_STEP * min(limit, len(order)):
        return _select_by_pairs(order, sweep, limit, iou)
    return _select_stepwise(order, ordered, limit, iou)


class _XSweep:
    """The boxes sorted by left edge, and for each, the later ones that start before its right.

    Every pair of boxes whose x spans overlap, so every pair that can intersect, appears
    exactly once (from the box of the two that comes first by left edge). Boxes with a NaN
    corner intersect nothing and are left out.
    """

    def __init__(self, ordered: np.ndarray) -> None:
        placed = np.flatnonzero(~np.isnan(ordered).any(axis=1))
        self.by_left = placed[np.argsort(ordered[placed, 1], kind="stable")]
        self.sides = [np.ascontiguousarray(side) for side in ordered[self.by_left].T]
        ends = np.searchsorted(self.sides[1], self.sides[3], side="left")
        self.counts = np.maximum(ends - np.arange(len(self.by_left)) - 1, 0)
        self.pairs = int(self.counts.sum())

    def suppressions(self, iou: float) -> tuple[np.ndarray, np.ndarray]:
        """Every pair whose IoU exceeds ``iou``, as (earlier, later) positions in score order.

        Made :data:`PAIR_CHUNK` pairs at a time, with :func:`_overlaps`'s arithmetic: the
        same sides, products and sums, so the same verdicts.
        """
        total = np.cumsum(self.counts)
        cuts = np.searchsorted(total, np.arange(PAIR_CHUNK, self.pairs, PAIR_CHUNK), "left")
        y_min, x_min, y_max, x_max = self.sides
        areas = (y_max - y_min) * (x_max - x_min)
        earlier, later = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for start, stop in zip([0, *(cuts + 1)], [*(cuts + 1), len(self.counts)], strict=True):
            counts = self.counts[start:stop]
            first = np.repeat(np.arange(start, stop), counts)
            before = np.cumsum(counts) - counts
            second = first + 1 + np.arange(len(first)) - np.repeat(before, counts)
            across = np.minimum(x_max[first], x_max[second]) - x_min[second]
            down = np.minimum(y_max[first], y_max[second]) - np.maximum(y_min[first], y_min[second])
            meet = (across > 0) & (down > 0)
            first, second = first[meet], second[meet]
            hit = _exceeds(down[meet] * across[meet], areas[first], areas[second], iou)
            one, other = self.by_left[first[hit]], self.by_left[second[hit]]
            earlier.append(np.minimum(one, other))
            later.append(np.maximum(one, other))
        return np.concatenate(earlier), np.concatenate(later)


def _select_by_pairs(order: np.ndarray, sweep: _XSweep, limit: int, iou: float) -> list[int]:
    """The greedy pass, with every suppression (earlier box over later) found beforehand."""
    earlier, later = sweep.suppressions(iou)
    by_earlier = np.argsort(earlier, kind="stable")
    suppressed = later[by_earlier].tolist()
    starts = np.searchsorted(earlier[by_earlier], np.arange(len(order) + 1)).tolist()
    alive = bytearray(b"\x01") * len(order)
    chosen: list[int] = []
    for position, index in enumerate(order.tolist()):
        if not alive[position]:
            continue
        chosen.append(index)
        if len(chosen) == limit:
            break
        for later_position in suppressed[starts[position] : starts[position + 1]]:
            alive[later_position] = 0
    return chosen


def _select_stepwise(order: np.ndarray, ordered: np.ndarray, limit: int, iou: float) -> list[int]:
    """The greedy pass: each box chosen suppresses, in one vectorised step, those it overlaps.

    They are looked for only among boxes whose left edge is near enough to reach it (a
    sorted window): as many steps as boxes chosen, each over its neighbours.
    """
    left, right = ordered[:, 1], ordered[:, 3]
    by_left = np.argsort(left, kind="stable")
    sorted_left = left[by_left]
    widest = float(np.nanmax(right - left, initial=0.0))
    alive = np.ones(len(order), dtype=bool)
    chosen: list[int] = []
    position = 0
    while len(chosen) < limit:
        while position < len(order) and not alive[position]:
            position += 1
        if position == len(order):
            break
        chosen.append(int(order[position]))
        low = np.searchsorted(sorted_left, left[position] - widest, side="left")
        high = np.searchsorted(sorted_left, right[position], side="right")
        near = by_left[low:high]
        near = near[(near > position) & alive[near]]
        alive[near[_overlaps(ordered[position : position + 1], ordered[near], iou)]] = False
        position += 1
    return chosen


def _scalar(value: np.ndarray | None, default: float) -> float | None:
    if value is None or np.asarray(value).size == 0:
        return None if default is None else default
    return float(np.asarray(value).ravel()[0])


@register("NonMaxSuppression", accepts={"center_point_box": (0, 1)})
def non_max_suppression(
    boxes: np.ndarray,
    scores: np.ndarray,
    max_output_boxes_per_class: np.ndarray | None = None,
    iou_threshold: np.ndarray | None = None,
    score_threshold: np.ndarray | None = None,
    center_point_box: int = 0,
) -> np.ndarray:
    """ONNX NonMaxSuppression: (batch, class, box) rows of the boxes kept, per class."""
    limit = max(int(_scalar(max_output_boxes_per_class, 0) or 0), 0)
    iou = _scalar(iou_threshold, 0.0) or 0.0
    floor = _scalar(score_threshold, None)  # type: ignore[arg-type]
    rows = []
    for batch in range(boxes.shape[0]):
        corners = _corners(boxes[batch], center_point_box)
        for cls in range(scores.shape[1]):
            for index in _select(corners, scores[batch, cls], limit, iou, floor):
                rows.append((batch, cls, index))
    return np.array(rows, dtype=np.int64).reshape(-1, 3)
