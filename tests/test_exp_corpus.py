"""exp_corpus: a mismatch its library alone makes as well is the library's, not autopart's."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.experiment_import import EXPERIMENTS, import_experiment
from tests.test_profile import tiny_cnn


def test_a_mismatch_the_library_alone_makes_is_the_librarys(
    tmp_path: Path, variant_peers_run: None
) -> None:
    pytest.importorskip("openvino")
    exp = import_experiment("exp_corpus")
    sys.path.insert(0, str(EXPERIMENTS / "corpus"))
    from corpus import CorpusModel, InputSpec

    file = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), file)

    @dataclass(frozen=True)
    class Local(CorpusModel):
        def path(self, cache: Path = tmp_path) -> Path:
            return file

    graph_input = tiny_cnn().graph.input[0]
    shape = tuple(d.dim_value for d in graph_input.type.tensor_type.shape.dim)
    model = Local(
        name="tiny", source="onnx", family="test", description="", licence="", sha256="",
        size=0, manifest="", inputs=(InputSpec(graph_input.name, shape, "float32", "normal"),),
    )  # fmt: skip
    feeds = {graph_input.name: np.random.default_rng(0).standard_normal(shape, np.float32)}
    from autopart.tuning.peers import peers

    (alone,) = peers(str(file), only="openvino alone f32")[0].values()
    library = alone(feeds)
    found = exp.library_alone(model, "cpu@openvino", feeds, library, 1e-3)
    assert found["status"] == "library" and "openvino alone" in found["detail"]
    elsewhere = {name: value + 1.0 for name, value in library.items()}  # not what it gives
    assert exp.library_alone(model, "cpu@openvino", feeds, elsewhere, 1e-3) == {}
    assert exp.library_alone(model, "cpu/0@openvino", feeds, library, 1e-3) == {}  # a unit
    assert exp.library_alone(model, "cpu@numpy", feeds, library, 1e-3) == {}  # no library
