"""Op costs scaled to the screen's whole timings where the model's own windows are missing."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.costmodel.calibration import CALIBRATION, window_key
from autopart.costmodel.costs import Costs
from autopart.costmodel.measurements import Measurement, RowKind
from autopart.ir.target import VirtualDevice
from autopart.loader import load_model
from autopart.plan.build import build_plan_for
from autopart.plan.schema import Plan
from autopart.profile.store import Profile
from autopart.testing.scale_models import op_chain, synthetic_costs
from autopart.tuning.verify import Measured
from autopart.tuning.whole_scale import note, scale_to_whole, whole_factor

NUMPY, ORT, ORT_UNIT = "cpu@numpy", "cpu@onnxruntime", "cpu/0@onnxruntime"


def chain(nodes: int = 40, seed: int = 0) -> Costs:
    """Generated costs of an elementwise chain on numpy, onnxruntime and one of its units."""
    return synthetic_costs(load_model(op_chain(nodes, seed)), [NUMPY, ORT, ORT_UNIT], seed)


def single(costs: Costs, target: str) -> Plan:
    """The plan running every node of ``costs.graph`` on ``target``."""
    parsed = VirtualDevice.parse(target)
    assignment = {node.name: parsed for node in costs.graph.nodes}
    return build_plan_for(costs.graph, assignment, parsed, "chain")


def op_sum(costs: Costs, target: str) -> float:
    """What the search's op costs predict for ``target`` running the whole model."""
    parsed = VirtualDevice.parse(target)
    return costs.launch_cost(parsed) + sum(e[parsed] for e in costs.node_cost.values())


def timed(seconds: float) -> Measured:
    """A runner timed whole at ``seconds``."""
    return Measured(latencies=[seconds] * 3, round_medians=[seconds] * 3, tolerance=math.inf)


def test_targets_timed_far_from_their_op_sums_are_scaled_to_the_timing_and_units_alike() -> None:
    """numpy timed at 4x its op sum and onnxruntime at 0.4x: the search's op sums then
    equal the timings, the unit is scaled as its device, and the note names all three."""
    costs = chain()
    before = {t: op_sum(costs, t) for t in (NUMPY, ORT, ORT_UNIT)}
    plans = {f"single:{t}": single(costs, t) for t in (NUMPY, ORT)}
    whole = {f"single:{NUMPY}": timed(4 * before[NUMPY]), f"single:{ORT}": timed(0.4 * before[ORT])}
    applied = scale_to_whole(costs, Profile({"fingerprint": "x"}), plans, whole)
    assert {str(t) for t in applied} == {NUMPY, ORT, ORT_UNIT}
    assert op_sum(costs, NUMPY) == pytest.approx(4 * before[NUMPY], rel=1e-9)
    assert op_sum(costs, ORT) == pytest.approx(0.4 * before[ORT], rel=1e-9)
    unit = VirtualDevice.parse(ORT_UNIT)
    assert applied[unit] == applied[VirtualDevice.parse(ORT)]
    (text,) = note(applied)
    assert NUMPY in text and ORT_UNIT in text
    assert note({}) == []


def test_a_timing_near_the_op_sum_or_the_models_own_windows_leave_the_costs_alone() -> None:
    costs = chain()
    untouched = {n: dict(e) for n, e in costs.node_cost.items()}
    plans = {f"single:{t}": single(costs, t) for t in (NUMPY, ORT)}
    near = 1.0 + CALIBRATION.gross_error * 0.9  # off by less than the gross error
    profile = Profile({"fingerprint": "x"})
    windowed = window_key(costs.graph, 0, 10)
    profile.record(RowKind.CALIBRATION, ORT, windowed, Measurement.from_samples([1e-3]),
                   predicted_s=1e-3)  # fmt: skip
    whole = {f"single:{NUMPY}": timed(near * op_sum(costs, NUMPY)),
             f"single:{ORT}": timed(4 * op_sum(costs, ORT))}  # fmt: skip
    assert scale_to_whole(costs, profile, plans, whole) == {}  # nor the unit: its device's
    assert costs.node_cost == untouched


def test_a_plan_with_nodes_off_its_target_gives_no_factor() -> None:
    costs = chain(12)
    ort, numpy_target = VirtualDevice.parse(ORT), VirtualDevice.parse(NUMPY)
    names = [node.name for node in costs.graph.nodes]
    assignment = {n: (numpy_target if i == 3 else ort) for i, n in enumerate(names)}
    mixed = build_plan_for(costs.graph, assignment, numpy_target, "chain")
    assert whole_factor(costs, ort, mixed, 10 * op_sum(costs, ORT)) is None
    assert whole_factor(costs, ort, single(costs, ORT), costs.launch_cost(ort) / 2) is None


@settings(max_examples=40, deadline=None)
@given(ratio=st.floats(1e-3, 1e3), seed=st.integers(0, 100))
def test_the_factor_stays_in_the_calibration_range_and_is_applied_only_past_the_gross_error(
    ratio: float, seed: int
) -> None:
    costs = chain(10, seed)
    target = VirtualDevice.parse(ORT)
    factor = whole_factor(costs, target, single(costs, ORT), ratio * op_sum(costs, ORT))
    gross = abs(1.0 / ratio - 1.0) > CALIBRATION.gross_error
    low, high = CALIBRATION.factor_range
    if factor is None:
        assert not gross or ratio * op_sum(costs, ORT) <= costs.launch_cost(target)
    else:
        assert gross and low <= factor <= high


BF16, INT8 = "cpu@openvino:bf16", "cpu@openvino:int8"


@settings(max_examples=40, deadline=None)
@given(
    bf16_ratio=st.floats(0.2, 0.5), int8_ratio=st.floats(0.2, 0.5), every=st.integers(2, 5),
    seed=st.integers(0, 50),
)  # fmt: skip
def test_a_plan_on_its_target_and_a_fallback_scales_its_target_by_what_the_fallback_leaves(
    bf16_ratio: float, int8_ratio: float, every: int, seed: int
) -> None:
    """int8's plan runs every ``every``-th node on bf16 (int8 cannot), in one partition,
    timed whole: int8's costs are scaled so that the plan's prediction is that timing."""
    costs = synthetic_costs(load_model(op_chain(30, seed)), [BF16, INT8], seed)
    bf16, int8 = VirtualDevice.parse(BF16), VirtualDevice.parse(INT8)
    names = [node.name for node in costs.graph.nodes]
    fallback = set(names[::every])
    for name in fallback:
        del costs.node_cost[name][int8]  # not supported in int8
    assignment = {n: bf16 if n in fallback else int8 for n in names}
    mixed = build_plan_for(costs.graph, assignment, bf16, "chain")
    assert len(mixed.partitions) == 1

    def predicted() -> float:
        return costs.launch_cost(int8) + sum(costs.node_cost[n][t] for n, t in assignment.items())

    int8_s = sum(costs.node_cost[n][int8] for n in names if n not in fallback)
    timing = (
        costs.launch_cost(int8)
        + int8_ratio * int8_s
        + bf16_ratio * sum(costs.node_cost[n][bf16] for n in fallback)
    )
    plans = {f"single:{BF16}": single(costs, BF16), f"single:{INT8}": mixed}
    bf16_s = costs.launch_cost(bf16) + bf16_ratio * (op_sum(costs, BF16) - costs.launch_cost(bf16))
    whole = {f"single:{BF16}": timed(bf16_s), f"single:{INT8}": timed(timing)}
    applied = scale_to_whole(costs, Profile({"fingerprint": "x"}), plans, whole)
    assert applied[int8] == pytest.approx(int8_ratio, rel=1e-6)
    assert applied[bf16] == pytest.approx(bf16_ratio, rel=1e-6)
    assert predicted() == pytest.approx(timing, rel=1e-6)


def test_a_fallback_not_timed_whole_gives_its_target_no_factor() -> None:
    costs = synthetic_costs(load_model(op_chain(12)), [BF16, INT8], 0)
    bf16, int8 = VirtualDevice.parse(BF16), VirtualDevice.parse(INT8)
    assignment = {n.name: (bf16 if i % 3 == 0 else int8) for i, n in enumerate(costs.graph.nodes)}
    mixed = build_plan_for(costs.graph, assignment, bf16, "chain")
    whole = {f"single:{INT8}": timed(0.2 * op_sum(costs, INT8))}
    plans = {f"single:{INT8}": mixed}
    assert scale_to_whole(costs, Profile({"fingerprint": "x"}), plans, whole) == {}
