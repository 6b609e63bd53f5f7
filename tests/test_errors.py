"""Errors a user can cause: one line naming the problem, exit status 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from autopart.cli import main


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def assert_one_line_error(code: int, output: str, *fragments: str) -> None:
    assert code == 2, output
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def tiny_model(op_types: list[str], shape: list[int] | None = None) -> onnx.ModelProto:
    shape = shape or [2, 3]
    nodes, previous = [], "x"
    for index, op in enumerate(op_types):
        nodes.append(helper.make_node(op, [previous], [f"v{index}"], name=f"n{index}"))
        previous = f"v{index}"
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_not_onnx(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_text("this is not a protobuf")
    assert_one_line_error(*invoke("run", str(path)), "not a valid ONNX model")


def test_truncated_file(tmp_path: Path, transformer_path: Path) -> None:
    data = transformer_path.read_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 3])
    assert_one_line_error(*invoke("info", str(path)), "not a valid ONNX model")


def test_missing_file(tmp_path: Path) -> None:
    assert_one_line_error(*invoke("run", str(tmp_path / "absent.onnx")), "absent.onnx")


def test_unknown_ops_are_all_named(tmp_path: Path) -> None:
    model = tiny_model(["Relu", "FrobnicateA", "Relu", "FrobnicateB", "FrobnicateA"])
    path = _save(model, tmp_path / "unknown.onnx")
    code, output = invoke("run", str(path))
    assert_one_line_error(code, output, "FrobnicateA (nodes n1, n4)", "FrobnicateB (nodes n3)")


def test_ops_without_numpy_kernel_are_all_named(tmp_path: Path) -> None:
    """Random ops: numpy has no kernel, and none is borrowed from onnxruntime (no oracle)."""
    model = tiny_model(["Relu", "RandomNormalLike", "Relu", "RandomNormalLike"])
    path = _save(model, tmp_path / "nokernel.onnx")
    assert_one_line_error(
        *invoke("run", str(path)), "numpy does not support", "RandomNormalLike (nodes n1, n3)"
    )


def _npz(path: Path, **arrays: np.ndarray) -> str:
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return str(path)


def test_wrong_input_shape(tmp_path: Path) -> None:
    model = _save(tiny_model(["Relu"]), tmp_path / "m.onnx")
    inputs = _npz(tmp_path / "in.npz", x=np.zeros((3, 3), np.float32))
    assert_one_line_error(*invoke("run", str(model), "--inputs", inputs), "'x'", "shape [3, 3]")


def test_wrong_input_dtype(tmp_path: Path) -> None:
    model = _save(tiny_model(["Relu"]), tmp_path / "m.onnx")
    inputs = _npz(tmp_path / "in.npz", x=np.zeros((2, 3), np.float64))
    assert_one_line_error(*invoke("run", str(model), "--inputs", inputs), "dtype float64")


def test_missing_input(tmp_path: Path) -> None:
    model = _save(tiny_model(["Relu"]), tmp_path / "m.onnx")
    inputs = _npz(tmp_path / "in.npz", y=np.zeros((2, 3), np.float32))
    assert_one_line_error(*invoke("run", str(model), "--inputs", inputs), "missing input", "x")


def test_corrupt_inputs_file(tmp_path: Path) -> None:
    model = _save(tiny_model(["Relu"]), tmp_path / "m.onnx")
    bad = tmp_path / "in.npz"
    bad.write_text("nope")
    assert_one_line_error(*invoke("run", str(model), "--inputs", str(bad)), "in.npz")


def _external_model(tmp_path: Path, location: str) -> Path:
    weight = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(
        model,
        str(folder / "m.onnx"),
        save_as_external_data=True,
        location="w.bin",
        size_threshold=0,
    )
    saved = onnx.load(str(folder / "m.onnx"), load_external_data=False)
    for entry in saved.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    onnx.save(saved, str(folder / "m.onnx"))
    return folder / "m.onnx"


def test_external_data_inside_the_folder_loads(tmp_path: Path) -> None:
    path = _external_model(tmp_path, "w.bin")
    inputs = _npz(tmp_path / "in.npz", x=np.ones((2, 3), np.float32))
    out = tmp_path / "out.npz"
    code, output = invoke("run", str(path), "--inputs", inputs, "--out", str(out))
    assert code == 0, output
    assert np.array_equal(np.load(out)["y"], np.arange(6, dtype=np.float32).reshape(2, 3) + 1)


@pytest.mark.parametrize("location", ["../w.bin", "/etc/passwd", "sub/../../w.bin"])
def test_external_data_escaping_the_folder_is_refused(tmp_path: Path, location: str) -> None:
    path = _external_model(tmp_path, location)
    (tmp_path / "w.bin").write_bytes((path.parent / "w.bin").read_bytes())
    assert_one_line_error(*invoke("info", str(path)), "escapes the model folder")


def test_bad_input_shape_option() -> None:
    code, output = invoke("info", "squeezenet", "--input-shape", "nonsense")
    assert code == 2 and "Traceback" not in output
