"""Every zoo model, materialised with random weights, matches onnxruntime on cpu@numpy."""

from __future__ import annotations

import numpy as np
import pytest

import autopart
from autopart.errors import ModelError
from autopart.runtime import random_inputs
from tests.conftest import max_relative_error, run_onnxruntime, zoo_params


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_model_matches_onnxruntime(name: str) -> None:
    model = autopart.load_zoo_model(name)
    graph = autopart.load(model)
    feeds = random_inputs(graph, seed=3)
    result = autopart.run(graph, feeds)
    expected = run_onnxruntime(model, feeds)
    for output, reference in zip(graph.outputs, expected, strict=True):
        got = result.outputs[output]
        assert got.shape == reference.shape
        assert np.isfinite(got).all()
        assert max_relative_error(reference, got) <= 1e-3


def test_zoo_weights_are_not_degenerate() -> None:
    """The shipped weights make softmax uniform; materialised ones must not."""
    result = autopart.run("squeezenet")
    probabilities = next(iter(result.outputs.values())).ravel()
    assert probabilities.max() > 3 * probabilities.min()
    assert abs(probabilities.sum() - 1) < 1e-3


def test_zoo_materialisation_is_seeded() -> None:
    first = autopart.load_zoo_model("squeezenet", seed=1)
    again = autopart.load_zoo_model("squeezenet", seed=1)
    other = autopart.load_zoo_model("squeezenet", seed=2)
    assert first.SerializeToString() == again.SerializeToString()
    assert first.SerializeToString() != other.SerializeToString()


def test_a_zoo_model_asked_for_again_is_a_new_proto_of_the_same_model() -> None:
    first = autopart.load_zoo_model("squeezenet")
    kept = first.SerializeToString()
    first.graph.ClearField("initializer")  # a caller changing its copy changes no other
    again = autopart.load_zoo_model("squeezenet")
    assert again is not first and again.SerializeToString() == kept


def test_a_zoo_model_kept_on_disk_is_made_again_when_its_file_changes() -> None:
    from autopart import zoo

    first = autopart.load_zoo_model("squeezenet", seed=5).SerializeToString()
    path, _ = zoo._MADE[("squeezenet", 5)]
    assert path.read_bytes() == first  # kept in a file, not in memory
    path.write_bytes(first[: len(first) // 2])  # cut short behind the process's back
    assert autopart.load_zoo_model("squeezenet", seed=5).SerializeToString() == first
    assert path.read_bytes() == first  # made again and kept again


def test_unknown_zoo_name_lists_the_zoo() -> None:
    with pytest.raises(ModelError, match="resnet50"):
        autopart.load("resnet51")
