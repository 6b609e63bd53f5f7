"""A fuzz of OpenVINO's convolutions and pools against onnxruntime, wider than conformance.

Two f32 kernel bugs of OpenVINO's CPU plugin were found by chance by the conformance suite
(a 1x1 one-channel Conv padded by two or more at the end, and a Conv reading nothing but
padding: ``docs/openvino.md``). This suite draws their neighbourhood on purpose: Conv
(1-D and 2-D, groups and depthwise, kernels to 4, strides to 3, dilations, asymmetric pads
to 3 or ``auto_pad``), ConvTranspose (strides, pads, output padding), MaxPool (dilations,
ceil mode) and AveragePool (count_include_pad, ceil mode). The invariant: **every
configuration autopart offers OpenVINO** (``supports``, with its agreement probe) computes
what onnxruntime computes, in f32 within 1e-4 of the output's magnitude and in bf16 as the
conformance suite holds it; one it refuses is left out, whether by ``supports`` or by
refusing it compiled (a MaxPool whose kernel outgrows its padded input: profiling marks
such a node unsupported on the target, ``autopart.profile.profiler``). The cases are derandomized, so a
run is repeatable; ``AUTOPART_FUZZ_EXAMPLES`` raises their number for a longer hunt.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from autopart.errors import TargetError
from autopart.ir.target import VirtualDevice
from autopart.targets.resolve import available_targets, resolve
from autopart.testing.cases import OpCase, conv_case, drawn_array, single_node_case
from autopart.testing.conformance import assert_close_reduced, magnitude, run_case

EXAMPLES = int(os.environ.get("AUTOPART_FUZZ_EXAMPLES", "300"))
TOLERANCE = 1e-4  # of the output's largest magnitude (at least 1), in f32
TARGETS = [
    str(t)
    for t in available_targets()
    if t.codegen == "openvino" and t.precision in (None, "bf16") and t.unit in (None, 0)
]


def _out_size(size: int, kernel: int, stride: int, dilation: int, pads: int, ceil: bool) -> int:
    span = size + pads - ((kernel - 1) * dilation + 1)
    return (-(-span // stride) if ceil else span // stride) + 1


@st.composite
def conv_cases(draw: st.DrawFn) -> OpCase:
    """Conv, 1-D or 2-D: groups or depthwise, kernels to 4, strides to 3, pads to 3."""
    rank = draw(st.sampled_from([1, 2, 2]))
    group = draw(st.sampled_from([1, 1, 2]))
    channels = group * draw(st.integers(1, 4))
    if draw(st.booleans()):
        group = channels
    out_channels = group * draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 4)) for _ in range(rank)]
    strides = [draw(st.integers(1, 3)) for _ in range(rank)]
    dilations = [draw(st.integers(1, 2)) for _ in range(rank)]
    sizes = [draw(st.integers(1, 12)) for _ in range(rank)]
    attrs: dict = {"group": group, "kernel_shape": kernel, "strides": strides}
    auto_pad = draw(
        st.sampled_from(["NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
    )
    if auto_pad == "NOTSET":
        pads = [draw(st.integers(0, 3)) for _ in range(2 * rank)]
        attrs |= {"pads": pads, "dilations": dilations}
        for axis in range(rank):
            total = pads[axis] + pads[axis + rank]
            assume(
                _out_size(sizes[axis], kernel[axis], strides[axis], dilations[axis], total, False)
                >= 1
            )
    else:
        attrs["auto_pad"] = auto_pad
        for axis in range(rank):
            assume(sizes[axis] >= kernel[axis])
    return conv_case(draw, attrs, (draw(st.integers(1, 2)), channels, *sizes), out_channels)


@st.composite
def conv_transpose_cases(draw: st.DrawFn) -> OpCase:
    """ConvTranspose over 2-D images: strides, pads, output padding, dilations."""
    channels, out_channels = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(2)]
    strides = [draw(st.integers(1, 3)) for _ in range(2)]
    dilations = [draw(st.integers(1, 2)) for _ in range(2)]
    pads = [draw(st.integers(0, k - 1)) for k in kernel] * 2
    padding = [draw(st.integers(0, max(s, d) - 1)) for s, d in zip(strides, dilations, strict=True)]
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "pads": pads,
             "output_padding": padding}  # fmt: skip
    x = drawn_array(draw, (1, channels, draw(st.integers(1, 8)), draw(st.integers(1, 8))))
    w = drawn_array(draw, (channels, out_channels, *kernel), -0.5, 0.5)
    return single_node_case("ConvTranspose", attrs, {"x": x}, {"w": w})


@st.composite
def pool_cases(draw: st.DrawFn) -> OpCase:
    """MaxPool (dilations) and AveragePool (count_include_pad), pads to the kernel, ceil mode."""
    op = draw(st.sampled_from(["MaxPool", "AveragePool"]))
    kernel = [draw(st.integers(1, 4)) for _ in range(2)]
    strides = [draw(st.integers(1, 3)) for _ in range(2)]
    dilations = [draw(st.integers(1, 2)) for _ in range(2)] if op == "MaxPool" else [1, 1]
    pads = [draw(st.integers(0, k - 1)) for k in kernel] + [
        draw(st.integers(0, k - 1)) for k in kernel
    ]
    ceil = draw(st.booleans())
    sizes = [draw(st.integers(1, 10)) for _ in range(2)]
    for axis in range(2):
        total = pads[axis] + pads[axis + 2]
        assume(
            _out_size(sizes[axis], kernel[axis], strides[axis], dilations[axis], total, ceil) >= 1
        )
    attrs: dict = {"kernel_shape": kernel, "strides": strides, "pads": pads, "ceil_mode": int(ceil)}
    if op == "MaxPool":
        attrs["dilations"] = dilations
    else:
        attrs["count_include_pad"] = int(draw(st.booleans()))
    x = drawn_array(draw, (1, draw(st.integers(1, 3)), *sizes))
    return single_node_case(op, attrs, {"x": x})


@pytest.fixture(autouse=True, scope="module")
def own_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The agreement probe's answers go to a cache of this module's own, not the user's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AUTOPART_CACHE", str(tmp_path_factory.mktemp("fuzz-cache")))
        yield


def _onnxruntime(case: OpCase) -> dict[str, np.ndarray] | None:
    """onnxruntime's outputs of ``case``; None where it refuses the configuration."""
    try:
        session = ort.InferenceSession(
            case.model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, case.feeds), strict=True))
    except Exception:  # onnxruntime's own refusals are of many types
        return None


@pytest.mark.slow
@pytest.mark.skipif(not TARGETS, reason="OpenVINO offers no f32 target on this machine")
@pytest.mark.parametrize("target", TARGETS)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(case=st.one_of(conv_cases(), conv_transpose_cases(), pool_cases()))
def test_every_convolution_and_pool_openvino_is_offered_computes_what_onnxruntime_does(
    target: str, case: OpCase
) -> None:
    expected = _onnxruntime(case)
    assume(expected is not None)
    assert expected is not None
    spec = VirtualDevice.parse(target)
    try:
        got = run_case(resolve(spec), case)
    except TargetError:  # claimed, then refused compiled: profiling marks it unsupported
        got = None
    assume(got is not None)  # refused: left to another target
    assert got is not None
    for name, want in expected.items():
        assert got[name].shape == want.shape, case.label
        if spec.precision is not None:  # bf16: held as conformance holds it
            assert_close_reduced(got[name], want, spec.precision, case.label, magnitude(case))
            continue
        scale = max(float(np.abs(want).max(initial=0.0)), 1.0)
        error = float(np.abs(got[name] - want).max(initial=0.0))
        assert error <= TOLERANCE * scale, (case.label, error / scale)
