"""The precision experiments' own parts: the Pareto front, the per-node error, the inputs.

``experiments/exp_precision.py`` and ``experiments/_task_inputs.py`` (what
``exp_task_agreement.py`` feeds the held-out models); the models themselves do not run.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autopart import api
from autopart.ir.feeds import random_inputs
from autopart.runtime.executor import Executor
from autopart.targets.openvino import codegen as ovgen
from tests.experiment_import import import_experiment
from tests.test_profile import tiny_cnn

pytest.importorskip("matplotlib")
BF16 = ovgen.OpenVinoCodegen.available() and "bf16" in ovgen.OpenVinoCodegen.precisions()


@pytest.fixture(scope="module")
def precision() -> ModuleType:
    """exp_precision, imported as its script would be (beside ``_common``)."""
    return import_experiment("exp_precision")


@pytest.fixture(scope="module")
def inputs() -> ModuleType:
    """_task_inputs, imported as the task-agreement script imports it."""
    return import_experiment("_task_inputs")


points = st.lists(
    st.tuples(st.floats(1e-9, 1.0), st.floats(0.1, 1e3)), min_size=1, max_size=30
).map(lambda pairs: pd.DataFrame(pairs, columns=["error", "ms"]))


def _dominates(a: pd.Series, b: pd.Series) -> bool:
    return a["error"] <= b["error"] and a["ms"] <= b["ms"] and (a != b).any()


@given(points)
def test_the_front_is_what_no_point_dominates(precision: ModuleType, table: pd.DataFrame) -> None:
    edge = precision.front(table)
    for index, row in table.iterrows():
        dominated = any(_dominates(other, row) for _, other in table.iterrows())
        on_front = index in edge.index
        duplicate_kept = (edge[["error", "ms"]] == row[["error", "ms"]]).all(axis=1).any()
        assert not (on_front and dominated)
        assert dominated or on_front or duplicate_kept
    assert edge["error"].is_monotonic_increasing and edge["ms"].is_monotonic_decreasing


def test_the_front_leaves_out_what_did_not_run(precision: ModuleType) -> None:
    table = pd.DataFrame({"error": [1e-3, math.nan, 1e-2], "ms": [5.0, 1.0, math.nan]})
    assert precision.front(table).index.tolist() == [0]


def test_the_budgets_run_exact_first_and_the_loose_one_as_asked(precision: ModuleType) -> None:
    found = precision.budgets(0.07)
    assert [b.name for b in found] == ["f32", "default", "loose"]
    assert found[0].keywords() == {"precision": "f32", "tolerance": None}
    assert found[1].keywords() == {"precision": None, "tolerance": None}
    assert found[2].keywords() == {"precision": None, "tolerance": 0.07}
    assert found[0].allows("cpu/0@openvino") and not found[0].allows("cpu@openvino:bf16")
    assert found[1].allows("cpu@openvino:bf16") and found[2].allows("cpu@numpy")


def test_held_out_models_load_with_their_shapes_and_frozen_inputs(precision: ModuleType) -> None:
    zoo, vad = precision.resolve(["squeezenet", "silero_vad"])
    assert (zoo.source, zoo.fields) == ("squeezenet", {})
    assert vad.source.endswith("silero_vad.onnx")
    assert vad.fields == {"input_shapes": {"input": [1, 512], "state": [2, 1, 128]},
                          "freeze": {"sr": 16000}}  # fmt: skip


@pytest.mark.skipif(not BF16, reason="this CPU has no bf16 units OpenVINO uses")
def test_a_node_in_bf16_costs_accuracy_and_none_in_bf16_costs_none(precision: ModuleType) -> None:
    graph = api.load(tiny_cnn())
    feeds = [random_inputs(graph, seed) for seed in range(2)]
    references = [Executor(graph).run(sample).outputs for sample in feeds]
    exact = precision.plan_error(graph, set(), feeds, references)
    conv = precision.plan_error(graph, {"conv1"}, feeds, references)
    everything = precision.plan_error(graph, {n.name for n in graph.nodes}, feeds, references)
    assert exact < 1e-5
    assert conv > 1e-4  # bf16 keeps 8 bits of mantissa: about 4e-3 relative per rounding
    assert everything >= conv * 0.5


@given(st.lists(st.integers(0, 5), max_size=40))
def test_ctc_merges_repeats_and_drops_blanks(inputs: ModuleType, path: list[int]) -> None:
    characters = ["blank", "a", "b", "c", "d", " "]
    scores = np.eye(6, dtype=np.float32)[path] if path else np.zeros((0, 6), np.float32)
    expected, previous = "", None
    for index in path:
        if index != 0 and index != previous:
            expected += characters[index]
        previous = index
    assert inputs.ctc_decode(scores[None], characters) == expected


def test_rec_classes_are_blank_the_dictionary_and_a_space(inputs: ModuleType) -> None:
    assert inputs.rec_characters("x\ny") == ["blank", "x", "y", " "]


def test_magika_features_strip_and_pad_as_magika_does(inputs: ModuleType) -> None:
    short = inputs.magika_features(b"  \n%PDF-1.4 body \n\n")
    assert short.shape == (1, 2048) and short.dtype == np.int32
    assert short[0, :14].tolist() == [*b"%PDF-1.4 body", 256]  # stripped both ends
    assert short[0, 14:1024].tolist() == [256] * (1024 - 14)
    assert short[0, 1024 : 2048 - 13].tolist() == [256] * (1024 - 13)
    assert short[0, -13:].tolist() == list(b"%PDF-1.4 body")
    data = b" " + bytes(range(256)) * 40 + b"\n"  # 10,242 bytes: read as two 4 KiB blocks
    ends = inputs.magika_features(data)
    assert ends[0, :1024].tolist() == list(data[1:1025])  # the beginning, left-stripped
    assert ends[0, 1024:].tolist() == list(data[-1025:-1])  # the end, right-stripped


def test_file_ends_reads_both_blocks_of_a_large_file(inputs: ModuleType, tmp_path: Path) -> None:
    data = bytes(np.random.default_rng(0).integers(0, 256, 20_000, dtype=np.uint8))
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    assert inputs.file_ends(path) == data[:4096] + data[-4096:]
    path.write_bytes(data[:5000])
    assert inputs.file_ends(path) == data[:5000]


@given(st.integers(1, 5000))
def test_vad_chunks_follow_the_wrapper(inputs: ModuleType, length: int) -> None:
    stream = np.arange(1, length + 1, dtype=np.float32)
    chunks = list(inputs.vad_chunks(stream))
    assert len(chunks) == math.ceil(length / 512)
    assert all(chunk.shape == (1, 576) for chunk in chunks)
    assert chunks[0][0, :64].tolist() == [0.0] * 64  # no context before the first chunk
    for before, after in itertools.pairwise(chunks):
        assert after[0, :64].tolist() == before[0, -64:].tolist()
    new = np.concatenate([chunk[0, 64:] for chunk in chunks])
    assert new[:length].tolist() == stream.tolist() and not new[length:].any()


def test_rendered_lines_normalise_as_rapidocr(inputs: ModuleType) -> None:
    lines = inputs.render_lines(6, 0, 20, turn=True)
    assert [line.turned for line in lines] == [False, True] * 3
    assert all(0 < len(line.text) <= 20 for line in lines)
    tensor = inputs.ocr_input(lines[0].image, 48, 192)
    assert tensor.shape == (1, 3, 48, 192) and tensor.dtype == np.float32
    assert tensor.min() >= -1.0 and tensor.max() <= 1.0
    wide = np.full((10, 1000, 3), 255, np.uint8)  # squeezed to the width, nothing padded
    assert (inputs.ocr_input(wide, 48, 192) == 1.0).all()
    narrow = np.full((48, 48, 3), 255, np.uint8)  # kept square, the rest padded with zeros
    padded = inputs.ocr_input(narrow, 48, 192)
    assert (padded[..., :48] == 1.0).all() and not padded[..., 48:].any()


def test_rendered_captchas_are_seeded_and_drawn_from_their_alphabet(inputs: ModuleType) -> None:
    captchas = inputs.render_captchas(8, 3)
    assert all(4 <= len(c.text) <= 5 and set(c.text) <= set(inputs.CAPTCHA_CHARACTERS)
               for c in captchas)  # fmt: skip
    assert all(c.image.shape == (60, 160, 3) and c.image.dtype == np.uint8 for c in captchas)
    again = inputs.render_captchas(8, 3)
    assert [c.text for c in again] == [c.text for c in captchas]
    assert all((a.image == c.image).all() for a, c in zip(again, captchas, strict=True))
    ink = [int((c.image.min(axis=2) < 120).sum()) for c in captchas]
    assert min(ink) > 200  # the characters are drawn, not only the ground and specks
