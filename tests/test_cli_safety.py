"""The command line under hostile or unlucky input: one ``error:`` line, names shown literally."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from autopart.io import load_tensors
from tests.test_errors import assert_one_line_error, invoke

HOSTILE = "n[/]a[bold]me\x1b]0;title\x07\x1b[31m\u202e"


def _model_with_names(tmp_path: Path, name: str) -> Path:
    node = helper.make_node("Relu", ["x"], [name], name=name)
    graph = helper.make_graph(
        [node],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 3])],
    )
    path = tmp_path / "hostile.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["tune", "--no-such-option"], "--no-such-option"),
        (["run"], "MODEL_OR_PLAN"),
        (["no-such-command"], "no-such-command"),
        (["run", "squeezenet", "--seed", "-1"], "--seed"),
        (["info", "squeezenet", "--input-shape", "x=-1,4"], "dims >= 0"),
        (["run", "squeezenet", "--repeat", "0"], "--repeat"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], fragment: str) -> None:
    assert_one_line_error(*invoke(*args), fragment)


@pytest.mark.parametrize("command", ["info", "run"])
def test_names_reach_the_terminal_literally(tmp_path: Path, command: str) -> None:
    code, output = invoke(command, str(_model_with_names(tmp_path, HOSTILE)))
    assert code == 0, output
    assert "\x1b" not in output and "\u202e" not in output and "\x07" not in output
    assert "n[/]a[bold]me\\x1b]0;title\\x07\\x1b[31m\\u202e" in output


def _npz_declaring(path: Path, shape: tuple[int, ...], padding: int = 100) -> Path:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": shape}
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", header.getvalue() + b"\0" * padding)
    return path


def test_npz_declaring_more_than_memory_is_refused_before_reading(tmp_path: Path) -> None:
    path = _npz_declaring(tmp_path / "big.npz", (10**12,))
    with pytest.raises(Exception, match="memory available") as caught:
        load_tensors(path, ["x"])
    assert type(caught.value).__name__ == "ResourceError"


def test_npz_with_unknown_names_is_refused_before_reading(tmp_path: Path) -> None:
    path = _npz_declaring(tmp_path / "big.npz", (10**12,))
    with pytest.raises(Exception, match="no input for: x; missing input y"):
        load_tensors(path, ["y"])


def test_importing_autopart_leaves_the_process_alone() -> None:
    script = (
        "import os, autopart, autopart.api, autopart.cli\n"
        "from autopart import host_memory\n"
        "print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'), host_memory._applied)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    env["PYTHONPATH"] = str(Path(__file__).parent.parent)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["None", "None"]
