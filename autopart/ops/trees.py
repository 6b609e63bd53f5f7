"""Reference kernel for the ONNX-ML TreeEnsemble (opset 5 of ai.onnx.ml)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from autopart.ops.registry import register

_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)
_COMPARE: dict[int, Callable[[float, float], bool]] = {
    _LEQ: lambda x, v: x <= v,
    _LT: lambda x, v: x < v,
    _GTE: lambda x, v: x >= v,
    _GT: lambda x, v: x > v,
    _EQ: lambda x, v: x == v,
    _NEQ: lambda x, v: x != v,
}


@dataclass(frozen=True)
class Forest:
    """The interior nodes (flat arrays) and leaves of every tree, as the attributes give them."""

    splits: np.ndarray
    features: Sequence[int]
    modes: Sequence[int]
    true_ids: Sequence[int]
    false_ids: Sequence[int]
    true_leafs: Sequence[int]
    false_leafs: Sequence[int]
    missing_true: Sequence[int]
    members: dict[int, set[float]]

    def goes_true(self, node: int, row: np.ndarray) -> bool:
        """Whether ``row`` takes the true branch at interior ``node``."""
        x = float(row[self.features[node]])
        if np.isnan(x) and self.missing_true and self.missing_true[node]:
            return True
        if self.modes[node] == _MEMBER:
            return x in self.members[node]
        return _COMPARE[self.modes[node]](x, float(self.splits[node]))

    def leaf(self, root: int, row: np.ndarray) -> int:
        """The leaf index ``row`` reaches from ``root``."""
        node = root
        if (
            self.true_leafs[node]
            and self.false_leafs[node]
            and (self.true_ids[node] == self.false_ids[node])
        ):
            return self.true_ids[node]
        while True:
            if self.goes_true(node, row):
                node, is_leaf = self.true_ids[node], self.true_leafs[node]
            else:
                node, is_leaf = self.false_ids[node], self.false_leafs[node]
            if is_leaf:
                return node


def _members(modes: Sequence[int], values: np.ndarray | None) -> dict[int, set[float]]:
    """Each MEMBER node's set: runs of ``membership_values`` separated by NaN, in node order."""
    sets: dict[int, set[float]] = {}
    runs = iter([] if values is None else list(np.asarray(values, dtype=np.float64).ravel()))
    for node, mode in enumerate(modes):
        if mode == _MEMBER:
            members: set[float] = set()
            for value in runs:
                if np.isnan(value):
                    break
                members.add(value)
            sets[node] = members
    return sets


@register(
    "TreeEnsemble",
    since=5,
    domain="ai.onnx.ml",
    accepts={"post_transform": (0,), "aggregate_function": (0, 1, 2, 3)},
)
def tree_ensemble(
    X: np.ndarray,
    aggregate_function: int = 1,
    leaf_targetids: Sequence[int] = (),
    leaf_weights: np.ndarray | None = None,
    membership_values: np.ndarray | None = None,
    n_targets: int = 1,
    nodes_falseleafs: Sequence[int] = (),
    nodes_falsenodeids: Sequence[int] = (),
    nodes_featureids: Sequence[int] = (),
    nodes_hitrates: np.ndarray | None = None,
    nodes_missing_value_tracks_true: Sequence[int] = (),
    nodes_modes: np.ndarray | None = None,
    nodes_splits: np.ndarray | None = None,
    nodes_trueleafs: Sequence[int] = (),
    nodes_truenodeids: Sequence[int] = (),
    post_transform: int = 0,
    tree_roots: Sequence[int] = (),
) -> np.ndarray:
    """ONNX-ML TreeEnsemble: per target, the sum, average, min or max of reached leaf weights."""
    modes = [int(m) for m in np.asarray(nodes_modes).ravel()]
    forest = Forest(
        np.asarray(nodes_splits).ravel(),
        nodes_featureids,
        modes,
        nodes_truenodeids,
        nodes_falsenodeids,
        nodes_trueleafs,
        nodes_falseleafs,
        nodes_missing_value_tracks_true,
        _members(modes, membership_values),
    )
    weights = np.asarray(leaf_weights).ravel()
    rows = X.reshape(len(X), int(np.prod(X.shape[1:], dtype=np.int64)))
    start = {0: 0.0, 1: 0.0, 2: np.inf, 3: -np.inf}[aggregate_function]
    out = np.full((len(rows), n_targets), start, dtype=np.float64)
    for r, row in enumerate(rows):
        for root in tree_roots:
            leaf = forest.leaf(root, row)
            target, value = leaf_targetids[leaf], float(weights[leaf])
            if aggregate_function == 2:
                out[r, target] = min(out[r, target], value)
            elif aggregate_function == 3:
                out[r, target] = max(out[r, target], value)
            else:
                out[r, target] += value / (len(tree_roots) if aggregate_function == 0 else 1)
    return out.astype(X.dtype)
