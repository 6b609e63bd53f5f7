"""Control flow: If, Loop and Scan, running their subgraphs with the reference kernels.

Each kernel receives its subgraphs bound as :class:`~autopart.ops.subgraph.Body` objects and,
after its own inputs, the values of the outer names its subgraphs read (``_captures``
names them, in order; see :func:`~autopart.ops.registry.bind`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autopart.errors import UnsupportedOpError
from autopart.ops.registry import register
from autopart.ops.subgraph import Body


def _split(args: Sequence[Any], captures: Sequence[str]) -> tuple[list[Any], dict[str, Any]]:
    """The node's own inputs, and the captured outer values by name."""
    own = len(args) - len(captures)
    return list(args[:own]), dict(zip(captures, args[own:], strict=True))


def _check_outputs(body: Body, made: int, wanted: int | None, op: str) -> None:
    """Refuse a subgraph that yields another number of outputs than its node has."""
    if wanted is not None and made != wanted:
        raise UnsupportedOpError(
            f"{op}'s subgraph {body.name!r} yields {made} outputs for the node's {wanted}"
        )


def _scalar(value: Any, what: str) -> Any:
    array = np.asarray(value)
    if array.size != 1:
        raise UnsupportedOpError(f"{what} must hold one element, not shape {list(array.shape)}")
    return array.reshape(-1)[0]


@register("If")
def if_(
    cond: np.ndarray,
    *captured: np.ndarray,
    then_branch: Body,
    else_branch: Body,
    _captures: Sequence[str] = (),
    _num_outputs: int | None = None,
) -> tuple[np.ndarray, ...]:
    """Run ``then_branch`` when ``cond`` is true, else ``else_branch``; return its outputs."""
    _, outer = _split([cond, *captured], _captures)
    branch = then_branch if bool(_scalar(cond, "If's condition")) else else_branch
    _check_outputs(branch, len(branch.outputs), _num_outputs, "If")
    return tuple(branch.run([], outer))


@register("Loop")
def loop(
    *args: np.ndarray | None,
    body: Body,
    _captures: Sequence[str] = (),
    _num_outputs: int | None = None,
) -> tuple[np.ndarray, ...]:
    """Run ``body`` while the trip count ``M`` and the condition allow; stack scan outputs.

    Inputs are ``M`` (optional), ``cond`` (optional) and the loop-carried values; the body
    takes (iteration number, condition, carried...) and returns (condition, carried...,
    scan outputs...). A loop with neither a trip count nor a condition is refused: it
    would never end.
    """
    own, outer = _split(args, _captures)
    if len(own) < 2:
        raise UnsupportedOpError("Loop needs its trip count and condition inputs (may be empty)")
    trip, cond, carried = own[0], own[1], list(own[2:])
    _check_outputs(body, len(body.outputs) - 1, _num_outputs, "Loop")
    if len(body.outputs) - 1 < len(carried):
        raise UnsupportedOpError(f"Loop's subgraph {body.name!r} drops loop-carried values")
    if trip is None and cond is None:
        raise UnsupportedOpError("Loop has neither a trip count nor a condition: it never ends")
    limit = None if trip is None else int(_scalar(trip, "Loop's trip count"))
    going = True if cond is None else bool(_scalar(cond, "Loop's condition"))
    count = len(carried)
    scans: list[list[np.ndarray]] = [[] for _ in range(len(body.outputs) - 1 - count)]
    iteration = 0
    while going and (limit is None or iteration < limit):
        step = [np.array(iteration, np.int64), np.array(going, np.bool_), *carried]
        results = body.run(step, outer)
        going = bool(_scalar(results[0], "Loop body's condition"))
        carried = results[1 : 1 + count]
        for collected, value in zip(scans, results[1 + count :], strict=True):
            collected.append(value)
        iteration += 1
    stacked = [
        np.stack(collected)
        if collected
        else body.empty_output(1 + count + index, f"Loop body {body.name!r}")
        for index, collected in enumerate(scans)
    ]
    return (*carried, *stacked)


def _directions(values: Sequence[int] | None, count: int, what: str) -> list[int]:
    chosen = list(values) if values is not None else [0] * count
    if len(chosen) != count or any(v not in (0, 1) for v in chosen):
        raise UnsupportedOpError(f"Scan's {what} must be {count} values of 0 or 1, not {chosen}")
    return chosen


def _axes(values: Sequence[int] | None, ranks: Sequence[int], what: str) -> list[int]:
    chosen = list(values) if values is not None else [0] * len(ranks)
    if len(chosen) != len(ranks) or any(
        not -r <= a < r for a, r in zip(chosen, ranks, strict=True)
    ):
        raise UnsupportedOpError(f"Scan's {what} {chosen} do not fit ranks {list(ranks)}")
    return [a % r for a, r in zip(chosen, ranks, strict=True)]


def _scan(
    states: list[np.ndarray],
    inputs: list[np.ndarray],
    body: Body,
    outer: Mapping[str, Any],
    attrs: Mapping[str, Any],
) -> list[np.ndarray]:
    """Scan-9 semantics on one batch item: final states, then the scan outputs."""
    in_dirs = _directions(attrs["in_dirs"], len(inputs), "input directions")
    in_axes = _axes(attrs["in_axes"], [x.ndim for x in inputs], "input axes")
    lengths = {x.shape[axis] for x, axis in zip(inputs, in_axes, strict=True)}
    if len(lengths) > 1:
        raise UnsupportedOpError(f"Scan's inputs have different lengths {sorted(lengths)}")
    length = lengths.pop() if lengths else 0
    outputs = len(body.outputs) - len(states)
    collected: list[list[np.ndarray]] = [[] for _ in range(outputs)]
    for t in range(length):
        slices = [
            np.take(x, length - 1 - t if d else t, axis=axis)
            for x, d, axis in zip(inputs, in_dirs, in_axes, strict=True)
        ]
        results = body.run([*states, *slices], outer)
        states = results[: len(states)]
        for bucket, value in zip(collected, results[len(states) :], strict=True):
            bucket.append(value)
    out_dirs = _directions(attrs["out_dirs"], outputs, "output directions")
    if not length:
        per_step = [body.empty_output(len(states) + i, "Scan") for i in range(outputs)]
        ranks = [x.ndim for x in per_step]
    else:
        per_step = []
        ranks = [bucket[0].ndim + 1 for bucket in collected]
    out_axes = _axes(attrs["out_axes"], ranks, "output axes")
    stacked = []
    for index, bucket in enumerate(collected):
        if not length:
            stacked.append(np.moveaxis(per_step[index], 0, out_axes[index]))
            continue
        ordered = bucket[::-1] if out_dirs[index] else bucket
        stacked.append(np.stack(ordered, axis=out_axes[index]))
    return [*states, *stacked]


@register("Scan", since=9)
def scan(
    *args: np.ndarray,
    body: Body,
    num_scan_inputs: int,
    scan_input_directions: Sequence[int] | None = None,
    scan_output_directions: Sequence[int] | None = None,
    scan_input_axes: Sequence[int] | None = None,
    scan_output_axes: Sequence[int] | None = None,
    _captures: Sequence[str] = (),
    _num_outputs: int | None = None,
) -> tuple[np.ndarray, ...]:
    """Scan (opset 9 on): states carried through ``body`` over slices of the scan inputs."""
    own, outer = _split(args, _captures)
    split = len(own) - num_scan_inputs
    if split < 0:
        raise UnsupportedOpError(f"Scan has {len(own)} inputs but {num_scan_inputs} scan inputs")
    _check_outputs(body, len(body.outputs), _num_outputs, "Scan")
    if len(body.outputs) < split:
        raise UnsupportedOpError(f"Scan's subgraph {body.name!r} drops state values")
    attrs = {
        "in_dirs": scan_input_directions,
        "out_dirs": scan_output_directions,
        "in_axes": scan_input_axes,
        "out_axes": scan_output_axes,
    }
    return tuple(_scan(list(own[:split]), list(own[split:]), body, outer, attrs))


@register("Scan", since=8)
def scan8(
    sequence_lens: np.ndarray | None,
    *args: np.ndarray,
    body: Body,
    num_scan_inputs: int,
    directions: Sequence[int] | None = None,
    _captures: Sequence[str] = (),
    _num_outputs: int | None = None,
) -> tuple[np.ndarray, ...]:
    """Scan-8: like Scan-9 over axis 1, for each item of a leading batch axis.

    ``sequence_lens`` shorter than the scan inputs' length are refused (the padding of
    shorter sequences is not implemented).
    """
    own, outer = _split(args, _captures)
    split = len(own) - num_scan_inputs
    states, inputs = list(own[:split]), list(own[split:])
    _check_outputs(body, len(body.outputs), _num_outputs, "Scan")
    if split < 0 or len(body.outputs) < split:
        raise UnsupportedOpError(f"Scan's inputs do not fit {num_scan_inputs} scan inputs")
    if not (states or inputs) or not (states or inputs)[0].shape[0]:
        raise UnsupportedOpError("Scan-8 needs a batch of at least one item")
    batch = (states or inputs)[0].shape[0]
    length = inputs[0].shape[1] if inputs else 0
    if sequence_lens is not None and np.any(np.asarray(sequence_lens) != length):
        raise UnsupportedOpError("Scan-8 with sequence_lens shorter than the inputs")
    attrs = {"in_dirs": directions, "out_dirs": None, "in_axes": None, "out_axes": None}
    items = [
        _scan([s[b] for s in states], [x[b] for x in inputs], body, outer, attrs)
        for b in range(batch)
    ]
    return tuple(np.stack([item[i] for item in items]) for i in range(len(items[0])))
