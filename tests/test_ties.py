"""Outputs that agree but for the order of tied rows: rows move only within a tie, and
detections shuffled within their ties line up again."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.tuning.oracle import errors_up_to_ties, relative_error
from autopart.tuning.ties import tie_reorderings

TOLERANCE = 1e-4


def detections(sizes: list[int], seed: int) -> dict[str, np.ndarray]:
    """Boxes, labels and descending scores, ``sizes`` rows per distinct score (a tie)."""
    rng = np.random.default_rng(seed)
    levels = np.sort(rng.choice(np.arange(1, 1000), len(sizes), replace=False))[::-1] / 1000
    scores = np.repeat(levels, sizes).astype(np.float32)
    scores += rng.uniform(-1e-7, 1e-7, scores.shape).astype(np.float32)  # ulps apart
    scores = np.sort(scores)[::-1]
    rows = len(scores)
    return {
        "boxes": rng.uniform(0, 300, (rows, 4)).astype(np.float32),
        "labels": rng.integers(0, 90, rows).astype(np.int64),
        "scores": scores,
        "row": np.arange(rows),
        "image": rng.uniform(size=(1, 3)).astype(np.float32),  # another length: stays put
    }


def runs_of(scores: np.ndarray) -> np.ndarray:
    """The tie of each row (the rule the module states, computed here in a loop)."""
    scale = float(np.abs(scores).max())
    runs, run = [0], 0
    for before, after in itertools.pairwise(scores):
        run += abs(float(after) - float(before)) > TOLERANCE * scale
        runs.append(run)
    return np.asarray(runs)


def agree(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> bool:
    return all(relative_error(got[name], want[name]) <= TOLERANCE for name in want)


def detector_model(path: Path) -> Path:
    """A model whose outputs are its inputs: 4 scores and 4 boxes, saved at ``path``."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["scores"]), helper.make_node("Abs", ["b"], ["boxes"])],
        "detector",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [4, 4])],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


sizes_strategy = st.lists(st.integers(1, 6), min_size=2, max_size=12)


@settings(max_examples=80, deadline=None)
@given(sizes=sizes_strategy, seed=st.integers(0, 10_000))
def test_rows_shuffled_within_their_ties_line_up_again(sizes: list[int], seed: int) -> None:
    want = detections(sizes, seed)
    runs = runs_of(want["scores"])
    rng = np.random.default_rng(seed + 1)
    order = np.concatenate([rng.permutation(np.flatnonzero(runs == r)) for r in np.unique(runs)])
    got = {name: values[order] if len(values) == len(runs) else values
           for name, values in want.items()}  # fmt: skip
    got["scores"] = want["scores"]
    if any(size > 1 for size in sizes):
        assert any(agree(reordered, want) for _, reordered in tie_reorderings(got, want, TOLERANCE))


@settings(max_examples=80, deadline=None)
@given(sizes=sizes_strategy, seed=st.integers(0, 10_000))
def test_no_row_ever_leaves_its_tie(sizes: list[int], seed: int) -> None:
    want = detections(sizes, seed)
    rng = np.random.default_rng(seed + 2)
    got = dict(want)
    got["boxes"] = rng.uniform(0, 300, want["boxes"].shape).astype(np.float32)  # any rows
    got["labels"] = rng.permutation(want["labels"])
    runs = runs_of(want["scores"])
    for key, reordered in tie_reorderings(got, want, TOLERANCE):
        assert key == "scores"
        moved_from = reordered["row"]  # where each row was in got
        assert sorted(moved_from) == list(range(len(runs)))
        assert np.array_equal(runs[moved_from], runs)
        assert np.array_equal(reordered["image"], got["image"])


@settings(max_examples=60, deadline=None)
@given(
    sizes=sizes_strategy, seed=st.integers(0, 10_000), pair=st.tuples(st.integers(), st.integers())
)
def test_rows_swapped_across_ties_still_differ(
    sizes: list[int], seed: int, pair: tuple[int, int]
) -> None:
    """Two rows of different scores swapped (boxes and labels, the scores kept sorted)
    never pass as a reordering."""
    want = detections(sizes, seed)
    runs = runs_of(want["scores"])
    first = pair[0] % len(runs)
    others = np.flatnonzero(runs != runs[first])
    second = int(others[pair[1] % len(others)])
    got = {name: values.copy() for name, values in want.items()}
    for name in ("boxes", "labels"):
        got[name][[first, second]] = got[name][[second, first]]
    if np.array_equal(want["labels"][first], want["labels"][second]) and np.allclose(
        want["boxes"][first], want["boxes"][second]
    ):
        return
    assert not any(agree(reordered, want) for _, reordered in tie_reorderings(got, want, TOLERANCE))


def test_without_a_tie_or_a_sorted_key_nothing_is_reordered() -> None:
    want = detections([1, 1, 1, 1], 0)
    assert list(tie_reorderings(want, want, TOLERANCE)) == []
    tied = detections([3, 2], 0)
    shuffled = dict(tied, scores=tied["scores"][::-1].copy())  # ascending where want descends
    assert list(tie_reorderings(shuffled, tied, TOLERANCE)) == []
    assert list(tie_reorderings({}, tied, TOLERANCE)) == []


def test_errors_up_to_ties_name_the_key_only_when_a_reordering_was_needed() -> None:
    want = detections([3, 1, 2], 5)
    errors, tied = errors_up_to_ties(want, want, TOLERANCE)
    assert tied is None and max(errors.values()) == 0.0
    order = np.array([2, 0, 1, 3, 5, 4])  # within the ties of 3 and 2 rows
    got = {name: v[order] if len(v) == 6 else v for name, v in want.items()}
    got["scores"] = want["scores"]
    got["row"] = want["row"][order]
    errors, tied = errors_up_to_ties(got, want, TOLERANCE)
    assert tied == "scores" and max(errors.values()) <= TOLERANCE
    across = np.array([3, 1, 2, 0, 4, 5])  # the lone row 3 swapped into the first tie
    got = {name: v[across] if len(v) == 6 and name != "scores" else v for name, v in want.items()}
    errors, tied = errors_up_to_ties(got, want, TOLERANCE)
    assert tied is None and max(errors.values()) > TOLERANCE


def test_run_check_accepts_rows_of_tied_scores_in_another_order_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``autopart run --check``: an oracle that sorted tied boxes another way still agrees."""
    import importlib

    from autopart.io import save_tensors
    from tests.test_errors import invoke

    model = detector_model(tmp_path / "detector.onnx")
    scores = np.array([0.9, 0.5, 0.5, 0.1], np.float32)
    boxes = np.arange(16, dtype=np.float32).reshape(4, 4)
    save_tensors(tmp_path / "x.npz", {"s": scores, "b": boxes})
    run_command = importlib.import_module("autopart.cli.run")  # the package names the command
    swapped = boxes[[0, 2, 1, 3]]
    monkeypatch.setattr(
        run_command, "oracle_outputs",
        lambda *_: ("an oracle", {"scores": scores, "boxes": swapped}),
    )  # fmt: skip
    code, output = invoke("run", str(model), "--inputs", str(tmp_path / "x.npz"), "--check")
    assert code == 0, output
    assert "once rows of tied scores are put in its order (ok)" in " ".join(output.split())
    swapped = boxes[[1, 0, 2, 3]]  # across scores 0.9 and 0.5: a real mismatch
    code, output = invoke("run", str(model), "--inputs", str(tmp_path / "x.npz"), "--check")
    assert "(MISMATCH)" in output and "tied" not in output


def test_the_tuning_judge_forgives_the_order_of_tied_rows_and_nothing_else(
    tmp_path: Path,
) -> None:
    """A race judges a detector whose tied boxes come in another order as agreeing.

    A peer that swaps two boxes of equal score is within the tolerance; one that swaps boxes
    of different scores keeps its error, in the race's results and in ``Judge.tally``.
    """
    from autopart import api
    from autopart.tuning.judge import Judge
    from autopart.tuning.verify import measure_plans

    graph = api.load(detector_model(tmp_path / "detector.onnx"))
    scores = np.array([0.9, 0.5, 0.5, 0.1], np.float32)
    boxes = np.arange(16, dtype=np.float32).reshape(4, 4) + 1
    feeds = {"s": scores, "b": boxes}

    def peer(order: list[int]):  # type: ignore[no-untyped-def]
        return lambda _feeds: {"scores": scores, "boxes": boxes[order]}

    within, across = [0, 2, 1, 3], [1, 0, 2, 3]
    judge = Judge(graph)
    reference = {"scores": scores, "boxes": boxes}
    assert judge.tally(reference, peer(within)(feeds))[1] == 0.0
    assert judge.tally(reference, peer(across)(feeds))[1] > 0.1
    measured = measure_plans(
        graph, {}, feeds, rounds=2, min_timed_s=0.0,
        peers={"tied": peer(within), "swapped": peer(across)},
    )  # fmt: skip
    assert measured["tied"].max_error == 0.0 and measured["tied"].correct
    assert measured["swapped"].max_error > 0.1 and not measured["swapped"].correct
