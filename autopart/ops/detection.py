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


def _overlaps(box: np.ndarray, others: np.ndarray, threshold: float) -> np.ndarray:
    """Whether the IoU of ``box`` with each of ``others`` exceeds ``threshold``."""
    low = np.maximum(box[:2], others[:, :2])
    high = np.minimum(box[2:], others[:, 2:])
    sides = high - low
    inter = np.where((sides > 0).all(axis=1), sides.prod(axis=1), 0.0)
    area = (box[2:] - box[:2]).prod()
    areas = (others[:, 2:] - others[:, :2]).prod(axis=1)
    union = area + areas - inter
    valid = (inter > 0) & (area > 0) & (areas > 0) & (union > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return valid & (inter / np.where(union > 0, union, 1) > threshold)


def _select(
    corners: np.ndarray, scores: np.ndarray, limit: int, iou: float, floor: float | None
) -> list[int]:
    """Greedy selection: highest score first (lower index on ties), skipping overlaps.

    Each box chosen suppresses, in one vectorised step, the later candidates it overlaps,
    looked for only among boxes whose left edge is near enough to reach it (a sorted
    window): as many steps as boxes chosen, each over its neighbours, not every candidate.
    """
    candidates = np.arange(len(scores)) if floor is None else np.flatnonzero(scores > floor)
    order = candidates[np.lexsort((candidates, -scores[candidates]))]
    ordered = corners[order]
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
        alive[near[_overlaps(ordered[position], ordered[near], iou)]] = False
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
