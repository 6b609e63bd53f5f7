"""The command line under hostile or unlucky input: one ``error:`` line, names shown literally."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
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


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["tune", "squeezenet", "--budget", "nan"], "--budget must be a finite"),
        (["tune", "squeezenet", "--budget", "inf"], "--budget must be a finite"),
        (["tune", "squeezenet", "--budget", "-5"], "--budget must be a finite"),
        (["tune", "squeezenet", "--rounds", "0"], "--rounds must be an integer"),
        (["tune", "squeezenet", "--seed", "-1"], "--seed must be an integer"),
        (["bench", "squeezenet", "--rounds", "0"], "--rounds must be an integer"),
        (["profile", "squeezenet", "--budget", "nan"], "--budget must be a finite"),
        (["tune", "squeezenet", "--storage", "foo://x"], "cannot open the study storage"),
        (
            ["tune", "squeezenet", "--storage", "postgresql://nobody@127.0.0.1:1/none"],
            "cannot open the study storage",
        ),
    ],
)
def test_nonsense_options_are_refused_before_any_work(args: list[str], fragment: str) -> None:
    assert_one_line_error(*invoke(*args), fragment)


def test_a_storage_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "study.db"
    path.write_text("not a database")
    code, output = invoke("tune", "squeezenet", "--storage", f"sqlite:///{path}")
    assert_one_line_error(code, output, "cannot open the study storage", "not a database")


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["tune", "squeezenet", "-o", "{ro}/plan.json"], "plan file"),
        (["tune", "squeezenet", "--search-dir", "{ro}/search"], "search folder"),
        (["bench", "squeezenet", "--csv", "{ro}/bench.csv"], "CSV file"),
        (["run", "squeezenet", "--out", "{ro}/out.npz"], "outputs file"),
        (["run", "squeezenet", "--save-plan", "{ro}/plan.json"], "plan file"),
        (["profile", "squeezenet", "--profiles", "{ro}/profiles"], "profile"),
    ],
)
def test_unwritable_outputs_are_refused_before_the_work(
    args: list[str], what: str, tmp_path: Path
) -> None:
    if os.geteuid() == 0:
        read_only = "/proc"  # root may write anywhere on disk; not in /proc
    else:
        read_only = str(tmp_path / "ro")
        os.mkdir(read_only, 0o500)
    started = time.perf_counter()
    code, output = invoke(*[arg.replace("{ro}", read_only) for arg in args])
    assert_one_line_error(code, output, what, "cannot be written")
    assert time.perf_counter() - started < 30  # refused at once, not after profiling


def _declaring(tmp_path: Path, op: str, dims: list[int]) -> Path:
    """A model whose ``op`` makes (or whose input declares) a tensor of ``dims``."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [len(dims)], dims)
    if op == "input":
        nodes = [helper.make_node("Relu", ["x"], ["y"])]
        inputs, initializers = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)], []
    else:
        made = ["shape"] if op == "ConstantOfShape" else ["one", "shape"]
        nodes = [helper.make_node(op, made, ["big"]), helper.make_node("Add", ["big", "x"], ["y"])]
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])]
        initializers = [shape, helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])]
    graph = helper.make_graph(
        nodes, "declared", inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], initializers,
    )  # fmt: skip
    path = tmp_path / f"{op}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize(
    ("op", "dims"),
    [
        ("ConstantOfShape", [100_000, 1_000_000]),  # 1e11 elements, folded at load before
        ("Expand", [100_000, 1_000_000]),
        ("input", [100_000, 100_000]),  # 37 GiB of input
    ],
)
@pytest.mark.parametrize("command", ["info", "run"])
def test_declared_sizes_beyond_memory_are_refused_before_allocating(
    tmp_path: Path, op: str, dims: list[int], command: str
) -> None:
    started = time.perf_counter()
    assert_one_line_error(*invoke(command, str(_declaring(tmp_path, op, dims))), "memory")
    assert time.perf_counter() - started < 30


def test_show_draws_hostile_names_literally(tmp_path: Path) -> None:
    model = _model_with_names(tmp_path, HOSTILE)
    plan = tmp_path / "plan.json"
    assert invoke("run", str(model), "--save-plan", str(plan), "--repeat", "1")[0] == 0
    code, output = invoke("show", str(plan))
    assert code == 0, output
    assert "\x1b" not in output and "\u202e" not in output and "\x07" not in output
    assert "n[/]a[bold]me\\x1b]0;title\\x07\\x1b[31m\\u202e" in output
