"""The codegen conformance suite, in the style of optuna's ``testing`` suites.

A codegen author subclasses :class:`CodegenConformance` in a test module and names the
target to test::

    from autopart.testing.conformance import CodegenConformance

    class TestMyCodegen(CodegenConformance):
        target = "cpu@mycodegen"

Every op case the codegen claims (``supports``) is compiled for the target, run on its
device with inputs uploaded through the device, and compared with the numpy reference.
Cases it does not claim are skipped by hypothesis (``assume``), so partial codegens pass
on what they claim; a codegen must claim at least one case of the suite.

A target that names a reduced precision (``cpu@openvino:bf16``) is held to that
precision's tolerance (:data:`REDUCED_TOLERANCE`, on the largest error relative to the
output's largest magnitude, or for sums of products to :func:`magnitude`) on float
outputs; its other outputs (indices, masks from comparisons of nearly equal values) must
agree on :data:`REDUCED_AGREEMENT` of their elements. An int8 target is calibrated on each
case's own inputs. A target the machine does not offer is skipped, with the reason.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings

from autopart.ir.onnx_import import load_graph
from autopart.ir.target import VirtualDevice
from autopart.runtime.executor import Executor
from autopart.targets import qdq, quant_ranges
from autopart.targets.probe_model import with_absolute_weights
from autopart.targets.registry import get_codegen
from autopart.targets.resolve import ResolvedTarget, resolve
from autopart.testing.cases import OpCase, any_case

RTOL = ATOL = 1e-4
# bf16 keeps 8 significant bits (2**-8 = 0.4% per rounding); sums over hundreds of terms
# and a few chained roundings stay within a few percent of the output's magnitude.
# int8 (calibrated on the case's own inputs) maps an activation onto 256 levels of its
# range and a weight onto 255 per channel: 0.2-0.4% per term, summed over a few hundred.
REDUCED_TOLERANCE = {"bf16": 5e-2, "int8": 5e-2}
REDUCED_AGREEMENT = 0.9
# Ops whose every output is a sum of products of their inputs: a rounding of each term
# errs in proportion to sum |x| |w|, which cancellation can make far larger than the sum.
SUMS_OF_PRODUCTS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})


def run_case(resolved: ResolvedTarget, case: OpCase) -> dict[str, np.ndarray] | None:
    """Run ``case`` on ``resolved``; ``None`` when the codegen does not claim its node."""
    graph = load_graph(case.model, simplify_graph=False)
    node = graph.nodes[0]
    if not resolved.supports(node, graph):
        return None
    if resolved.target.computes_in == qdq.PRECISION:  # calibrated on the inputs it runs
        quant_ranges.attach(
            graph, quant_ranges.CalibrationSamples((dict(case.feeds),), stand_in=False)
        )
    device = resolved.placement.device
    compiled = resolved.codegen.compile(
        graph, graph.nodes, graph.inputs, graph.outputs, resolved.placement
    )
    env = {
        name: device.from_host(array, resolved.placement.unit) for name, array in case.feeds.items()
    }
    compiled.run(env)
    device.synchronize()
    return {name: device.to_host(env[name]) for name in graph.outputs}


def reference(case: OpCase) -> dict[str, np.ndarray]:
    """The numpy reference outputs of ``case``."""
    return Executor(load_graph(case.model, simplify_graph=False)).run(case.feeds).outputs


def magnitude(case: OpCase) -> float:
    """The magnitude a reduced precision's roundings scale with in ``case`` (0: the output's).

    For a node in :data:`SUMS_OF_PRODUCTS`, the largest output of the same node fed the
    absolute values of its inputs and weights: the ``sum |x| |w|`` that bounds a dot
    product's rounding error. A Conv of six terms whose output was -0.349 (magnitude 2.37)
    erred on int8 by 3.9% of the output, 0.6% of the magnitude. Other ops: 0.
    """
    nodes = case.model.graph.node
    if len(nodes) != 1 or nodes[0].op_type not in SUMS_OF_PRODUCTS:
        return 0.0
    feeds = {name: np.abs(array) for name, array in case.feeds.items()}
    outputs = reference(OpCase(case.label, with_absolute_weights(case.model), feeds))
    return max((float(np.abs(out).max(initial=0.0)) for out in outputs.values()), default=0.0)


class CodegenConformance:
    """Base class of a codegen's conformance tests; set ``target`` in the subclass."""

    target: ClassVar[str]

    def resolved(self) -> ResolvedTarget:
        """The target under test, bound to this machine (skipped where it is not offered)."""
        spec = VirtualDevice.parse(self.target)
        if spec.codegen is not None and spec.reduced:
            codegen = get_codegen(spec.codegen)
            if not codegen.available() or spec.computes_in not in codegen.precisions():
                pytest.skip(f"this machine does not offer {spec.computes_in} on {spec.codegen}")
        return resolve(self.target)

    def test_claims_something(self) -> None:
        """A codegen that claims no op at all is not a codegen."""
        resolved = self.resolved()
        from autopart.testing.cases import single_node_case

        ones = np.ones((4, 4), np.float32)
        probes = [
            single_node_case("Relu", {}, {"x": ones}),
            single_node_case("Add", {}, {"a": ones, "b": ones}),
            single_node_case("MatMul", {}, {"a": ones, "b": ones}),
            single_node_case(
                "Conv", {}, {"x": ones.reshape(1, 1, 4, 4)}, {"w": ones[:3, :3].reshape(1, 1, 3, 3)}
            ),
        ]
        assert any(run_case(resolved, probe) is not None for probe in probes)

    @settings(
        deadline=None,
        max_examples=120,
        # each subclass is its own executor; the cases they draw are independent of it
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
            HealthCheck.differing_executors,
        ],
    )
    @given(case=any_case())
    def test_op_matches_reference(self, case: OpCase) -> None:
        """Every claimed op agrees with the numpy reference."""
        resolved = self.resolved()
        got = run_case(resolved, case)
        assume(got is not None)
        assert got is not None
        precision = resolved.target.precision
        scale = 0.0 if precision is None else magnitude(case)
        for name, expected in reference(case).items():
            assert got[name].shape == expected.shape, (case.label, name)
            if precision is None:
                np.testing.assert_allclose(
                    got[name], expected, rtol=RTOL, atol=ATOL, err_msg=case.label
                )
            else:
                assert_close_reduced(got[name], expected, precision, case.label, scale)


def assert_close_reduced(
    got: np.ndarray, expected: np.ndarray, precision: str, label: str, scale: float = 0.0
) -> None:
    """``got`` agrees with ``expected`` as well as a ``precision`` computation can.

    The error is relative to ``expected``'s largest magnitude, or ``scale`` where larger
    (:func:`magnitude`: what the roundings scale with).
    """
    assert got.dtype == expected.dtype, label
    if expected.size == 0:
        return
    if np.issubdtype(expected.dtype, np.floating):
        finite = np.isfinite(expected)
        assert np.array_equal(np.isfinite(got), finite), label
        scale = max(float(np.abs(expected[finite]).max(initial=0.0)), scale) or 1.0
        error = float(np.abs(got[finite] - expected[finite]).max(initial=0.0)) / scale
        assert error <= REDUCED_TOLERANCE[precision], (label, error)
    else:
        agreement = float(np.mean(got == expected))
        assert agreement >= REDUCED_AGREEMENT, (label, agreement)
