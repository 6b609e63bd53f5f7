"""What a hostile or careless user can hand autopart: each gets one `error:` line, exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from autopart import api
from autopart.errors import ModelError
from autopart.ir.onnx_import import load_graph
from tests.conftest import make_model
from tests.test_errors import assert_one_line_error, invoke


def _chain(order: list[tuple[str, str, str]]) -> onnx.ModelProto:
    """Relu nodes ``(name, input, output)`` in the order given, from ``x`` to ``y``."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("Relu", [i], [o], name=n) for n, i, o in order]
    return make_model(helper.make_graph(nodes, "chain", [x], [y]))


def test_nodes_out_of_order_are_sorted_and_run() -> None:
    model = _chain([("second", "a", "y"), ("first", "x", "a")])
    graph = load_graph(model)
    assert [node.name for node in graph.nodes] == ["first", "second"]


def test_a_cycle_is_one_line_naming_its_nodes(tmp_path: Path) -> None:
    model = _chain([("first", "x", "a"), ("loop1", "c", "b"), ("loop2", "b", "c"),
                    ("last", "c", "y")])  # fmt: skip
    with pytest.raises(ModelError, match="'loop1', 'loop2' feed each other in a cycle"):
        load_graph(model)
    path = tmp_path / "cycle.onnx"
    onnx.save(model, str(path))
    assert_one_line_error(*invoke("info", str(path)), "cycle", "loop1")


def test_a_value_nothing_makes_is_named() -> None:
    with pytest.raises(ModelError, match="reads 'ghost', which no node"):
        load_graph(_chain([("first", "ghost", "y")]))


def test_a_directory_or_a_device_is_not_a_model(tmp_path: Path) -> None:
    assert_one_line_error(*invoke("info", str(tmp_path)), "is a directory")
    if Path("/dev/zero").exists():
        assert_one_line_error(*invoke("info", "/dev/zero"), "not a regular file")


def test_an_empty_dimension_in_an_input_shape_is_refused() -> None:
    code, output = invoke("info", "squeezenet", "--input-shape", "x=1,,4")
    assert_one_line_error(code, output, "--input-shape")


def test_a_seed_beyond_32_bits_is_refused(tmp_path: Path) -> None:
    for command in ("tune", "run"):
        code, output = invoke(command, "squeezenet", "--seed", str(2**32))
        assert_one_line_error(code, output, "--seed")


def test_a_model_with_no_nodes_cannot_be_tuned(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    path = tmp_path / "empty.onnx"
    onnx.save(make_model(helper.make_graph([], "empty", [x], [x])), str(path))
    assert_one_line_error(*invoke("tune", str(path), "--search-dir", str(tmp_path / "s"),
                                  "--profiles", str(tmp_path / "p")), "has no nodes")  # fmt: skip


def test_a_study_database_in_a_missing_folder_is_refused_and_not_made(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    code, output = invoke(
        "tune", "squeezenet", "--storage", f"sqlite:///{missing}/x.db", "--objective",
        "makespan", "--search-dir", str(tmp_path / "s"), "--profiles", str(tmp_path / "p"),
    )  # fmt: skip
    assert_one_line_error(code, output, "does not exist")
    assert not missing.exists()


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("fallback", "nope", "plan field plan.fallback must be a target"),
        ("measured", {"median_s": -5.0}, "must be a time in seconds"),
        ("measured", {"median_s": 1e-3, "round_medians_s": [-1.0]}, "round_medians_s[0]"),
    ],
)
def test_a_plan_with_impossible_fields_is_refused(
    tmp_path: Path, field: str, value: object, fragment: str
) -> None:
    plan, _ = api.make_plan("squeezenet", fallback="cpu@numpy")
    path = tmp_path / "plan.json"
    plan.save(path)
    document = json.loads(path.read_text())
    document[field] = value
    del document["check"]  # edited by hand
    path.write_text(json.dumps(document))
    code, output = invoke("show", str(path))
    assert_one_line_error(code, output, fragment)
    assert os.path.getsize(path) > 0
