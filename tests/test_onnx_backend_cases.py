"""The onnx package's PyTorch backend test cases, run with autopart's numpy codegen.

Each case folder under ``onnx/backend/test/data/pytorch-{converted,operator}`` holds a
``model.onnx`` and ``test_data_set_*`` folders of ``input_*.pb``/``output_*.pb`` tensors. The
model is imported with the data's input shapes and every output is compared with the reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from autopart.ir import load_graph
from autopart.runtime import Executor
from autopart.targets import get_codegen

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
SUITES = ("pytorch-converted", "pytorch-operator")

# Cases that cannot run, with the specific reason. Keep this short: fix kernels instead.
SKIPS: dict[str, str] = {}

# float32 reference outputs were produced by PyTorch; summation order differs from numpy's.
RTOL, ATOL = 1e-3, 1e-4


def _case_dirs() -> list[Path]:
    return sorted(
        (case for suite in SUITES if (DATA / suite).is_dir() for case in (DATA / suite).iterdir()),
        key=lambda case: case.name,
    )


CASES = _case_dirs()


def _read_tensor(path: Path) -> np.ndarray:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)


def _read_numbered(folder: Path, prefix: str) -> list[np.ndarray]:
    files = sorted(folder.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[-1]))
    return [_read_tensor(path) for path in files]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_backend_case(case: Path) -> None:
    if case.name in SKIPS:
        pytest.skip(SKIPS[case.name])
    data_sets = sorted(case.glob("test_data_set_*"))
    assert data_sets, f"{case} has no test_data_set_*"
    model = onnx.load(str(case / "model.onnx"))
    initializers = {tensor.name for tensor in model.graph.initializer}
    # input_<i>.pb feeds the i-th graph input that is not backed by an initializer.
    input_names = [info.name for info in model.graph.input if info.name not in initializers]
    for data_set in data_sets:
        inputs = _read_numbered(data_set, "input")
        expected = _read_numbered(data_set, "output")
        assert len(inputs) == len(input_names), f"{data_set.name}: input count mismatch"
        shapes = {name: array.shape for name, array in zip(input_names, inputs, strict=True)}
        graph = load_graph(case / "model.onnx", input_shapes=shapes)
        assert graph.inputs == input_names

        codegen = get_codegen("numpy")
        unclaimed = sorted({n.op_type for n in graph.nodes if not codegen.supports(n, graph)})
        assert not unclaimed, f"numpy codegen does not claim {unclaimed}: add a kernel or skip"

        feeds = dict(zip(graph.inputs, inputs, strict=True))
        # test_operator_pow and test_operator_sqrt take negative bases; the reference is NaN.
        with np.errstate(invalid="ignore"):
            outputs = Executor(graph).run(feeds).outputs
        assert len(graph.outputs) == len(expected)
        for name, want in zip(graph.outputs, expected, strict=True):
            got = outputs[name]
            assert got.shape == want.shape, f"output {name!r}: shape {got.shape} != {want.shape}"
            assert got.dtype == want.dtype, f"output {name!r}: dtype {got.dtype} != {want.dtype}"
            np.testing.assert_allclose(
                got, want, rtol=RTOL, atol=ATOL, err_msg=f"{case.name} output {name!r}"
            )


def test_skip_list_is_short_and_current() -> None:
    names = {case.name for case in CASES}
    assert len(CASES) >= 100, f"expected the onnx PyTorch backend cases under {DATA}"
    assert len(names) == len(CASES), "case names must be unique across the suites"
    assert len(SKIPS) <= 8, "fix kernels instead of growing the skip list"
    stale = sorted(set(SKIPS) - names)
    assert not stale, f"SKIPS names cases that do not exist: {stale}"
    assert all(reason.strip() for reason in SKIPS.values())
