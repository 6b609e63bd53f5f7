"""int8 on a CPU that sums u8 x i8 pairs in i16 (AVX2 without VNNI or AMX): 7-bit weights."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autopart.targets import cpu_units, qdq
from autopart.targets.openvino import library


def one_conv() -> onnx.ModelProto:
    """A 3x3 Conv of 8 channels with seeded full-range weights."""
    rng = np.random.default_rng(3)
    weight = numpy_helper.from_array(rng.uniform(-1, 1, (8, 8, 3, 3)).astype(np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "one_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
        initializer=[weight],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def weight_levels(quantised: bytes) -> int:
    """The largest |level| of the i8 weights in a QDQ model."""
    model = onnx.ModelProto.FromString(quantised)
    found = [
        numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type == TensorProto.INT8
    ]
    return int(max(np.abs(levels.astype(np.int32)).max() for levels in found))


@pytest.mark.parametrize(
    ("flags", "narrow", "bound"),
    [
        ({"avx2", "fma"}, True, 64),  # an AVX2-only EPYC: pairs of full products overflow i16
        ({"avx2", "avx512_vnni"}, False, 127),
        ({"avx2", "avx_vnni"}, False, 127),
        ({"avx2", "amx_int8"}, False, 127),
    ],
)
def test_weights_take_seven_bits_only_where_int8_pairs_sum_in_i16(
    monkeypatch: pytest.MonkeyPatch, flags: set[str], narrow: bool, bound: int
) -> None:
    monkeypatch.setattr(cpu_units, "cpu_flags", lambda: frozenset(flags))
    assert cpu_units.int8_sums_in_i16() is narrow
    ranges = {"x": (-2.0, 2.0)}
    quantised = qdq.quantised_once(one_conv(), ranges, {"conv"})
    assert weight_levels(quantised) == bound  # the largest weight reaches the last level
    assert qdq.WEIGHT_LEVELS[narrow] == bound
    # OpenVINO offers int8 on each, where it lists INT8 (its own probe)
    assert ("int8" in library.offered_precisions(frozenset(flags))) == (
        "INT8" in set(library.core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    )


def test_an_unknown_cpu_keeps_full_range_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_units, "cpu_flags", lambda: None)
    assert not cpu_units.int8_sums_in_i16()
    assert "int8" not in library.offered_precisions(frozenset({"sse4_2"}))  # no int8 units


def test_the_cache_keeps_the_two_quantisations_apart(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setattr(qdq, "cache_dir", lambda: tmp_path)
    model, ranges = one_conv(), {"x": (-2.0, 2.0)}
    levels = {}
    for narrow in (True, False):
        monkeypatch.setattr(qdq, "int8_sums_in_i16", lambda narrow=narrow: narrow)
        levels[narrow] = weight_levels(qdq.quantise(model, ranges, {"conv"}))
    assert levels == {True: 64, False: 127}  # neither read back the other's file
