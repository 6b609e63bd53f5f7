"""Property-based fuzzing of every saved format and of names, through the command line.

Each case is run by a worker process (``tests/fuzz_worker.py``) whose address space is
capped at 2 GiB over what it needs, with an alarm against hangs. Every case either works
(exit 0) or prints exactly one ``error:`` line and exits 2: never a traceback, a hang or
an allocation over the cap. The example counts add up to 2,000 cases (450 ONNX files, 150 declared sizes, 400 npz
inputs, 500 plans, 250 profiles, 250 sets of names).
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

ROOT = Path(__file__).parent.parent
FUZZ = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Worker:
    """A running ``fuzz_worker.py``; restarted after it dies."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "fuzz_worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        assert process.stdout is not None
        assert json.loads(process.stdout.readline()) == {"ready": True}
        return process

    def run(self, args: list[str], files: dict[str, bytes] | None = None) -> dict[str, Any]:
        """Run ``autopart ARGS`` with ``files`` in ``{dir}``; the worker's answer.

        A worker that dies is asked again from a fresh start: one command a process, as
        the command line runs, it must not die (a death after many cases in one capped
        address space can come from the cases before, not from this one).
        """
        answer = self._run_once(args, files)
        if answer["crash"] is not None and answer["crash"].startswith("worker died"):
            answer = self._run_once(args, files)
        return answer

    def _run_once(self, args: list[str], files: dict[str, bytes] | None) -> dict[str, Any]:
        if self.process is None or self.process.poll() is not None:
            self.process = self._start()
        assert self.process.stdin is not None and self.process.stdout is not None
        encoded = {name: base64.b64encode(data).decode() for name, data in (files or {}).items()}
        self.process.stdin.write(json.dumps({"args": args, "files": encoded}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            self.process = None
            return {"code": code, "output": "", "crash": f"worker died with status {code}"}
        return dict(json.loads(line))

    def close(self) -> None:
        """Stop the worker."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    running = Worker()
    yield running
    running.close()


def assert_works_or_one_error(answer: dict[str, Any], case: object) -> None:
    """The property: exit 0, or one ``error:`` line and exit 2; no crash, hang or traceback."""
    assert answer["crash"] is None, (case, answer["crash"])
    output = answer["output"]
    assert "Traceback" not in output, (case, output)
    if answer["code"] == 0:
        return
    lines = [line for line in output.splitlines() if line.strip()]
    assert answer["code"] == 2, (case, answer)
    assert len(lines) == 1 and lines[0].startswith("error: "), (case, output)


def tiny_model(names: tuple[str, str, str] = ("x", "relu", "y")) -> onnx.ModelProto:
    """``y = Sigmoid(Relu(x))`` over float32[2, 3], with the given input/node/output names."""
    source, node, output = names
    nodes = [
        helper.make_node("Relu", [source], [f"{node}:out"], name=node),
        helper.make_node("Sigmoid", [f"{node}:out"], [output], name=f"{node}:sigmoid"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info(source, TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


MODEL_BYTES = tiny_model().SerializeToString()


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


NPZ_BYTES = _npz(x=np.ones((2, 3), np.float32))


@pytest.fixture(scope="module")
def plan_text(worker: Worker, tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("plan")
    (folder / "tiny.onnx").write_bytes(MODEL_BYTES)
    answer = worker.run(
        ["run", str(folder / "tiny.onnx"), "--repeat", "1", "--assign",
         "Relu=cpu@onnxruntime", "--save-plan", str(folder / "plan.json")]
    )  # fmt: skip
    assert answer["code"] == 0, answer
    return (folder / "plan.json").read_text()


def mutations(base: bytes) -> st.SearchStrategy[bytes]:
    """``base`` with a few bytes flipped, inserted or cut, or truncated."""

    @st.composite
    def mutate(draw: st.DrawFn) -> bytes:
        data = bytearray(base)
        for _ in range(draw(st.integers(1, 8))):
            kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
            at = draw(st.integers(0, max(len(data) - 1, 0)))
            if kind == "flip" and data:
                data[at] ^= draw(st.integers(1, 255))
            elif kind == "insert":
                data[at:at] = draw(st.binary(min_size=1, max_size=16))
            elif kind == "delete":
                del data[at : at + draw(st.integers(1, 16))]
            else:
                del data[at:]
        return bytes(data)

    return mutate()


@settings(FUZZ, max_examples=300)
@given(data=st.one_of(st.binary(max_size=512), mutations(MODEL_BYTES)))
def test_fuzzed_onnx_bytes(worker: Worker, data: bytes) -> None:
    for command in (["info"], ["run", "--repeat", "1"]):
        answer = worker.run([*command, "{dir}/model.onnx"], {"model.onnx": data})
        assert_works_or_one_error(answer, data)


@st.composite
def declared_shapes(draw: st.DrawFn) -> onnx.ModelProto:
    """A model whose declared shapes or constant-folded sizes may be absurd."""
    dims = draw(st.lists(st.integers(-3, 10**12), min_size=1, max_size=4))
    kind = draw(st.sampled_from(["input", "constant_of_shape", "expand"]))
    shape = helper.make_tensor("shape", TensorProto.INT64, [len(dims)], dims)
    if kind == "input":
        graph = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "declared",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)],
        )
    else:
        op = "ConstantOfShape" if kind == "constant_of_shape" else "Expand"
        inputs = ["shape"] if op == "ConstantOfShape" else ["one", "shape"]
        graph = helper.make_graph(
            [helper.make_node(op, inputs, ["big"]), helper.make_node("Add", ["big", "x"], ["y"])],
            "declared",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)],
            initializer=[shape, helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])],
        )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@settings(FUZZ, max_examples=80)
@given(model=declared_shapes())
def test_declared_sizes_are_weighed_before_allocating(
    worker: Worker, model: onnx.ModelProto
) -> None:
    data = model.SerializeToString()
    for command in (["info"], ["run", "--repeat", "1"]):
        answer = worker.run([*command, "{dir}/model.onnx"], {"model.onnx": data})
        assert_works_or_one_error(answer, (command, model.graph))


@st.composite
def npz_files(draw: st.DrawFn) -> bytes:
    """Random bytes, a mutated valid file, or a well-formed file of random arrays."""
    kind = draw(st.sampled_from(["bytes", "mutated", "arrays", "declared"]))
    if kind == "bytes":
        return draw(st.binary(max_size=512))
    if kind == "mutated":
        return draw(mutations(NPZ_BYTES))
    if kind == "declared":
        header = io.BytesIO()
        shape = tuple(draw(st.lists(st.integers(0, 10**9), min_size=1, max_size=3)))
        np.lib.format.write_array_header_1_0(
            header, {"descr": "<f4", "fortran_order": False, "shape": shape}
        )
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("x.npy", header.getvalue() + draw(st.binary(max_size=64)))
        return buffer.getvalue()
    names = draw(st.lists(st.sampled_from(["x", "y", "x.npy", "../x"]), max_size=3, unique=True))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int64, np.bool_, np.float16]))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    return _npz(**{name: np.zeros(shape, dtype) for name in names})


@settings(FUZZ, max_examples=400)
@given(data=npz_files())
def test_fuzzed_npz_inputs(worker: Worker, data: bytes) -> None:
    answer = worker.run(
        ["run", "{dir}/tiny.onnx", "--repeat", "1", "--inputs", "{dir}/in.npz"],
        {"tiny.onnx": MODEL_BYTES, "in.npz": data},
    )
    assert_works_or_one_error(answer, data)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replace(value[path[0]], path[1:], new)
    return copy


@st.composite
def plan_documents(draw: st.DrawFn, base: str) -> str:
    """The valid plan with one field replaced, a random document, or a pathological one."""
    kind = draw(st.sampled_from(["field", "field", "field", "random", "deep", "huge_int"]))
    if kind == "random":
        return json.dumps(draw(JSON_VALUES))
    if kind == "deep":
        depth = draw(st.integers(1000, 100_000))
        return "[" * depth + "]" * depth
    if kind == "huge_int":
        return base.replace('"nbytes": ', '"nbytes": ' + "9" * draw(st.integers(20, 5000)), 1)
    document = json.loads(base)
    path = draw(st.sampled_from(_paths(document)))
    return json.dumps(_replace(document, path, draw(JSON_VALUES)))


@settings(FUZZ, max_examples=350)
@given(data=st.data())
def test_fuzzed_plans(worker: Worker, plan_text: str, data: st.DataObject) -> None:
    document = data.draw(plan_documents(plan_text))
    model_path = json.loads(plan_text)["model"]["source"]
    files = {"plan.json": document.encode()}
    for command in (["show"], ["run", "--repeat", "1"]):
        answer = worker.run([*command, "{dir}/plan.json"], files)
        assert_works_or_one_error(answer, (document[:500], model_path))


HOSTILE_TEXT = st.lists(
    st.sampled_from([*"ab/[]:=#@\\", "\x1b", "\x07", "\x9b", "\u202e", "\n", "]8;;", "[/]"]),
    min_size=1,
    max_size=12,
).map("".join)


@settings(FUZZ, max_examples=250)
@given(names=st.tuples(HOSTILE_TEXT, HOSTILE_TEXT, HOSTILE_TEXT))
def test_hostile_names_are_shown_literally(worker: Worker, names: tuple[str, str, str]) -> None:
    if len(set(names)) < 3 or any(f"{names[1]}:{s}" in names for s in ("out", "sigmoid")):
        return
    files = {"model.onnx": tiny_model(names).SerializeToString()}
    save = ["--save-plan", "{dir}/plan.json"]
    for args in (
        ["info", "{dir}/model.onnx"],
        ["run", "{dir}/model.onnx", "--repeat", "1", *save],
    ):
        answer = worker.run(args, files)
        assert_works_or_one_error(answer, names)
        for char in ("\x1b", "\x07", "\x9b", "\u202e"):
            assert char not in answer["output"], (names, answer["output"])


@pytest.fixture(scope="module")
def profile_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real profile of the tiny model, labelled as another machine's (tune only plans)."""
    from autopart import api
    from tests.test_profile import FAST

    folder = tmp_path_factory.mktemp("profile")
    model = folder / "tiny.onnx"
    model.write_bytes(MODEL_BYTES)
    targets = ["cpu@numpy", "cpu@onnxruntime"]
    _, profile, _ = api.profile(str(model), targets, folder / "profiles", settings=FAST)
    profile.meta["fingerprint"] = "another-machine"
    return profile.to_text()


CELLS = st.sampled_from(
    ["inf", "-inf", "nan", "0", "-1", "1e300", "", "x", "9" * 400, "cpu", "a->b", "op"]
)


@st.composite
def profile_documents(draw: st.DrawFn, base: str) -> str:
    """The profile with a few cells of its table replaced, or its text mutated."""
    if draw(st.booleans()):
        return draw(mutations(base.encode())).decode("utf-8", "replace")
    header, table = base.split("\n", 2)[:2], base.split("\n", 2)[2]
    rows = [line.split(",") for line in table.splitlines()]
    for _ in range(draw(st.integers(1, 3))):
        row = draw(st.integers(1, len(rows) - 1))
        column = draw(st.integers(0, len(rows[row]) - 1))
        rows[row][column] = draw(CELLS)
    return "\n".join([*header, *(",".join(row) for row in rows)]) + "\n"


@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_fuzzed_profile_rows(worker: Worker, profile_text: str, data: st.DataObject) -> None:
    document = data.draw(profile_documents(profile_text))
    answer = worker.run(
        ["tune", "{dir}/tiny.onnx", "--profile", "{dir}/p.csv", "--search-dir", "{dir}/s"],
        {"tiny.onnx": MODEL_BYTES, "p.csv": document.encode()},
    )
    assert_works_or_one_error(answer, document[-800:])
