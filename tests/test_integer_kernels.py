"""MatMulInteger and ConvInteger: exact integer products, computed by BLAS in float64.

Against onnxruntime where it has the operator (a scalar zero point for A) and computes it
exactly, and against an exact int64 product everywhere, per-row, per-column and
per-channel zero points and sums past int32 (which wrap as int32 arithmetic does)
included. onnxruntime's u8 x s8 product is exact only on CPUs with VNNI: with AVX2 alone
its kernel adds pairs of products in int16, which saturate (seen on a 2-core AMD EPYC
without AVX-512: 31 of 60 sums off by up to 23,916), so there the s8 case is left to the
exact product.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from autopart.ops.nn import conv
from autopart.ops.quantize import conv_integer, matmul_integer
from autopart.targets.cpu_units import cpu_flags
from tests.conftest import make_model


def _draw(rng: np.random.Generator, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _exact(A: np.ndarray, B: np.ndarray, a_zero: np.ndarray, b_zero: np.ndarray) -> np.ndarray:
    a = A.astype(np.int64) - a_zero.astype(np.int64).reshape((-1, 1) if a_zero.size > 1 else ())
    b = B.astype(np.int64) - b_zero.astype(np.int64)
    return np.matmul(a, b).astype(np.int32)  # wraps modulo 2**32, as int32 sums do


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**16),
    sizes=st.tuples(st.integers(1, 9), st.sampled_from([1, 7, 64, 40_000]), st.integers(1, 9)),
    types=st.sampled_from(
        [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8), (np.int8, np.uint8)]
    ),
    per_row=st.booleans(),
    per_column=st.booleans(),
)
def test_the_product_is_exact_and_wraps_as_int32(
    seed: int, sizes: tuple[int, int, int], types: tuple, per_row: bool, per_column: bool
) -> None:
    rng = np.random.default_rng(seed)
    a_type, b_type = types
    m, k, n = sizes
    A, B = _draw(rng, a_type, (m, k)), _draw(rng, b_type, (k, n))
    a_zero = _draw(rng, a_type, (m,) if per_row else ())
    b_zero = _draw(rng, b_type, (n,) if per_column else ())
    ours = matmul_integer(A, B, a_zero, b_zero)
    assert ours.dtype == np.int32
    np.testing.assert_array_equal(ours, _exact(A, B, a_zero, b_zero))


def _vnni() -> bool:
    return any("vnni" in flag for flag in cpu_flags() or ())


ORT_EXACT_B_TYPES = (np.uint8, np.int8) if _vnni() else (np.uint8,)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**16),
    per_column=st.booleans(),
    b_type=st.sampled_from(ORT_EXACT_B_TYPES),
)
def test_the_product_is_onnxruntimes(seed: int, per_column: bool, b_type: type) -> None:
    rng = np.random.default_rng(seed)
    A, B = _draw(rng, np.uint8, (2, 5, 33)), _draw(rng, b_type, (33, 6))
    a_zero, b_zero = _draw(rng, np.uint8, ()), _draw(rng, b_type, (6,) if per_column else ())
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    b_proto = TensorProto.INT8 if b_type is np.int8 else TensorProto.UINT8
    inputs = [
        helper.make_tensor_value_info(name, kind, value.shape)
        for name, kind, value in (
            ("a", TensorProto.UINT8, A), ("b", b_proto, B),
            ("az", TensorProto.UINT8, a_zero), ("bz", b_proto, b_zero),
        )
    ]  # fmt: skip
    output = [helper.make_tensor_value_info("y", TensorProto.INT32, None)]
    model = make_model(helper.make_graph([node], "mmi", inputs, output), opset=13)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {"a": A, "b": B, "az": a_zero, "bz": b_zero})
    np.testing.assert_array_equal(matmul_integer(A, B, a_zero, b_zero), theirs)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**16),
    channels=st.integers(1, 4),
    grouped=st.booleans(),
    per_channel=st.booleans(),
    strides=st.sampled_from([[1, 1], [2, 1]]),
)
def test_the_convolution_is_exact(
    seed: int, channels: int, grouped: bool, per_channel: bool, strides: list[int]
) -> None:
    rng = np.random.default_rng(seed)
    group = channels if grouped else 1
    maps = 2 * group
    x, w = (
        _draw(rng, np.uint8, (2, channels, 6, 5)),
        _draw(rng, np.int8, (maps, channels // group, 3, 2)),
    )
    x_zero = _draw(rng, np.uint8, ())
    w_zero = _draw(rng, np.int8, (maps,) if per_channel else ())
    pads = [1, 0, 1, 1]
    ours = conv_integer(x, w, x_zero, w_zero, group=group, pads=pads, strides=strides)
    centred_w = w.astype(np.int64) - w_zero.astype(np.int64).reshape(
        (-1, 1, 1, 1) if per_channel else ()
    )
    exact = conv(
        x.astype(np.int64) - int(x_zero), centred_w, group=group, pads=pads, strides=strides
    )
    assert ours.dtype == np.int32
    np.testing.assert_array_equal(ours, exact.astype(np.int32))
