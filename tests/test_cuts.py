"""Cut costs: where windows are cut, how a target's cut cost is read, how it is charged."""

from __future__ import annotations

from pathlib import Path

import pytest

from autopart import api
from autopart.costmodel.calibration import model_tag
from autopart.costmodel.cuts import cold_cost, cut_cost, cut_index
from autopart.costmodel.from_profile import costs_from_profile
from autopart.costmodel.fusion import fusion_pairs
from autopart.costmodel.measurements import Measurement
from autopart.profile import Profile
from autopart.profile.profiler import ProfileReport, plan_jobs
from autopart.targets.devices import discover
from autopart.targets.resolve import resolve
from tests.test_profile import FAST


def _row(seconds: float) -> Measurement:
    return Measurement(seconds, seconds, seconds, seconds, seconds, 5, "wall")


def test_windows_are_cut_near_the_middle_and_never_inside_a_fused_pair() -> None:
    graph = api.load("resnet50")
    fused = fusion_pairs(graph)
    for start in range(0, len(graph.nodes) - 16, 7):
        window = graph.nodes[start : start + 16]
        index = cut_index(graph, window)
        assert index is not None and 1 <= index < len(window)
        pair = fused.get(window[index].name)
        assert pair is None or pair.producer.name not in {n.name for n in window[:index]}
        assert abs(index - 8) <= 4
    assert cut_index(graph, graph.nodes[:1]) is None


def test_a_targets_cut_cost_is_the_median_window_difference_of_its_own_model_first() -> None:
    graph = api.load("squeezenet")
    profile = Profile({"fingerprint": "test"})
    assert cut_cost(profile, graph, "cpu@onnxruntime") == 0.0
    for index, (split, whole) in enumerate([(3e-3, 1e-3), (2e-3, 1.5e-3), (9e-3, 1e-3)]):
        key = f"other@0123456789ab[{index}:{index + 8}]"
        profile.record("cut", "cpu@onnxruntime", key, _row(split), whole_s=whole)
    assert cut_cost(profile, graph, "cpu@onnxruntime") == pytest.approx(2e-3)  # other models
    own = f"{model_tag(graph)}[7:15]"
    profile.record("cut", "cpu@onnxruntime", own, _row(1.2e-3), whole_s=1e-3)
    assert cut_cost(profile, graph, "cpu@onnxruntime") == pytest.approx(0.2e-3)
    profile.record("cut", "cpu@onnxruntime", own, _row(0.9e-3), whole_s=1e-3)
    assert cut_cost(profile, graph, "cpu@onnxruntime") == 0.0  # noise is not a negative cost


def test_a_target_with_no_cut_row_borrows_its_codegens_then_every_targets() -> None:
    """A budget that ends the cut jobs midway must not make the unmeasured targets' cuts free."""
    graph = api.load("squeezenet")
    profile = Profile({"fingerprint": "test"})
    own = f"{model_tag(graph)}[7:15]"
    other = "other@0123456789ab[0:8]"
    profile.record("cut", "cpu@onnxruntime", own, _row(1.4e-3), whole_s=1e-3)
    profile.record("cut", "cpu@onnxruntime", other, _row(9e-3), whole_s=1e-3)
    assert cut_cost(profile, graph, "opencl:0@opencl") == pytest.approx(0.4e-3)  # anyone's
    profile.record("cut", "cpu@openvino", other, _row(3e-3), whole_s=1e-3)
    assert cut_cost(profile, graph, "cpu/0@openvino:bf16") == pytest.approx(2e-3)  # openvino's
    assert cut_cost(profile, graph, "cpu/1@onnxruntime") == pytest.approx(0.4e-3)  # own model's
    assert cut_cost(profile, graph, "opencl:0@opencl") == pytest.approx(0.4e-3)
    assert cold_cost(profile, graph, "cpu@onnxruntime") == 0.0  # no cold row anywhere


UNIT = "cpu/0@onnxruntime"


@pytest.fixture(scope="module")
def unit_profile(tmp_path_factory: pytest.TempPathFactory) -> tuple[ProfileReport, Path]:
    """squeezenet profiled on one onnxruntime unit, once for this module: report, store."""
    store = tmp_path_factory.mktemp("profiles")
    report, _, _ = api.profile("squeezenet", [UNIT], store, settings=FAST)
    return report, store


def test_profiling_cuts_the_calibration_windows_and_charges_the_cut_per_partition(
    unit_profile: tuple[ProfileReport, Path],
) -> None:
    target = UNIT
    report, store = unit_profile
    profile = Profile.load(next(store.glob("*.csv")))
    graph = api.load("squeezenet")
    cuts = profile.rows("cut", target)
    windows = profile.rows("calibration", target)
    assert sorted(cuts["key"]) == sorted(windows["key"]) and len(cuts) == 3
    assert (cuts["median_s"] > 0).all() and (cuts["whole_s"] > 0).all()
    assert (cuts["runs"] >= FAST.min_runs).all()
    # one job per window: its whole runs, alternating with the halves, calibrate the window
    jobs = plan_jobs(graph, [resolve(target, discover())], Profile({"fingerprint": "empty"}))[0]
    assert sorted(j.key for j in jobs if j.kind in ("cut", "calibration")) == sorted(cuts["key"])
    assert {j.kind for j in jobs if j.key in set(cuts["key"])} == {"cut"}
    assert list(windows.sort_values("key")["runs"]) == list(cuts.sort_values("key")["runs"])
    costs = costs_from_profile(graph, profile, [target])
    (vdev,) = costs.targets
    wall = profile.measurement("launch", target, "wall")
    assert wall is not None
    assert costs.launch[vdev] == pytest.approx(max(wall.median_s, cut_cost(profile, graph, target)))
    for key in cuts["key"]:  # a cut dearer than the probe is what a partition is charged
        profile.record("cut", target, key, _row(0.06), whole_s=0.01)
    assert costs_from_profile(graph, profile, [target]).launch[vdev] == pytest.approx(0.05)
    again, _, _ = api.profile("squeezenet", [target], store, settings=FAST)
    assert again.new == 0 and again.reused == report.new


def test_windows_entered_cold_are_charged_to_every_partition_of_a_split_plan(
    unit_profile: tuple[ProfileReport, Path],
) -> None:
    target = UNIT
    profile = Profile.load(next(unit_profile[1].glob("*.csv")))
    graph = api.load("squeezenet")
    colds, cuts = profile.rows("cold", target), profile.rows("cut", target)
    assert sorted(colds["key"]) == sorted(cuts["key"])
    assert (colds["median_s"] > 0).all() and (colds["runs"] >= FAST.min_runs).all()
    whole = cuts.set_index("key")["whole_s"]
    assert (colds.set_index("key")["warm_s"] == whole).all()  # the same back-to-back runs
    costs = costs_from_profile(graph, profile, [target])
    (vdev,) = costs.targets
    assert costs.cold[vdev] == pytest.approx(cold_cost(profile, graph, target))
    for key in colds["key"]:
        profile.record("cold", target, key, _row(0.013), warm_s=0.01)
    assert cold_cost(profile, graph, target) == pytest.approx(0.003)
    assert cold_cost(profile, graph, "cpu/1@onnxruntime") == pytest.approx(0.003)  # borrowed
    costs = costs_from_profile(graph, profile, [target])
    names = [node.name for node in graph.nodes]
    assert costs.partition_cost(names, vdev, split=True) == pytest.approx(
        costs.partition_cost(names, vdev) + 0.003
    )
    # a profile saved before cold rows existed re-measures its windows, and nothing else
    older = Profile(profile.meta, profile.table[profile.table["kind"] != "cold"])
    jobs = plan_jobs(graph, [resolve(target, discover())], older)[0]
    assert sorted(job.kind for job in jobs) == ["cut"] * 3


def test_partitions_pay_back_unfused_consumers_and_layout_conversions_at_their_edges() -> None:
    from autopart.costmodel.costs import Costs
    from autopart.ir.target import VirtualDevice
    from autopart.search.simulator import simulate
    from tests.test_profile import tiny_cnn

    graph = api.load(tiny_cnn())  # conv1 -> relu1 -> conv2 -> add(relu1, conv2)
    ort, numpy_ = VirtualDevice.parse("cpu@onnxruntime"), VirtualDevice.parse("cpu@numpy")
    node_cost = {node.name: {ort: 1.0, numpy_: 1.0} for node in graph.nodes}
    costs = Costs(
        graph, [ort, numpy_], node_cost, launch={ort: 0.1},
        fused_producer={"relu1": "conv1"}, unfused={"relu1": {ort: 0.5}},
        layout={"conv2": {ort: 0.2}},
    )  # fmt: skip
    assert costs.partition_cost(["conv1", "relu1", "conv2", "add"], ort) == pytest.approx(4.1)
    assert costs.partition_cost(["relu1", "conv2", "add"], ort) == pytest.approx(3.0 + 0.5 + 0.1)
    assert costs.partition_cost(["conv2"], ort) == pytest.approx(1.1 + 0.2)  # in and out
    assert costs.partition_cost(["relu1"], numpy_) == pytest.approx(1.0)  # no edge costs there
    whole = api.make_plan(graph, fallback="cpu@onnxruntime")[0]
    split = api.make_plan(graph, ["name:conv1=cpu@numpy"], fallback="cpu@onnxruntime")[0]
    assert simulate(whole, costs).sequential_s == pytest.approx(4.1)
    assert simulate(split, costs).sequential_s == pytest.approx(1.0 + 3.0 + 0.5 + 0.1)


def test_op_costs_keep_what_fusion_and_layout_took_off_for_the_edges(tmp_path: Path) -> None:
    from autopart.costmodel.op_costs import op_costs
    from autopart.ir.signature import op_signature

    target = "cpu@onnxruntime"
    _, profile, _ = api.profile("squeezenet", [target], tmp_path, settings=FAST)
    graph = api.load("squeezenet")
    timed = profile.measurement("launch", target, "timed")
    assert timed is not None
    costs = op_costs(profile, graph, target, timed.median_s)
    fused = fusion_pairs(graph)
    assert costs.unfused and set(costs.unfused) <= set(fused)
    assert costs.layout and all(value > 0 for value in costs.layout.values())
    for name, extra in costs.layout.items():
        node = graph.node(name)
        row = profile.row("layout", target, op_signature(node, graph))
        assert row is not None and extra <= float(row["median_s"]) + 1e-12
    full = costs_from_profile(graph, profile, [target])
    assert full.fused_producer == {name: pair.producer.name for name, pair in fused.items()}


def test_the_kernel_floor_leaves_out_what_onnxruntimes_profiler_adds_to_every_kernel() -> None:
    from autopart.costmodel.op_costs import op_costs
    from autopart.ir.signature import op_signature

    graph = api.load("squeezenet")
    node = graph.nodes[0]
    target = "cpu@onnxruntime"
    profile = Profile({"fingerprint": "test"})
    signature = op_signature(node, graph)
    profile.record("op", target, signature, _row(20e-6))
    # its one-op run: 10 µs entry, 8 µs of layout kernels and 9 µs of its own, as profiled
    profile.record("layout", target, signature, _row(8e-6), kernel_s=9e-6)
    assert op_costs(profile, graph, target, 10e-6).seconds[node.name] == pytest.approx(9e-6)
    # the profiler puts 7 µs on a one-element Relu: the kernel floor is 2 µs, not 9
    profile.record("launch", target, "profiled", _row(7e-6))
    assert op_costs(profile, graph, target, 10e-6).seconds[node.name] == pytest.approx(2e-6)
    profile.record("launch", target, "profiled", _row(12e-6))
    assert op_costs(profile, graph, target, 10e-6).seconds[node.name] == pytest.approx(2e-6)


def test_onnxruntime_launches_record_the_profilers_overhead_and_old_profiles_gain_it(
    tmp_path: Path,
) -> None:
    targets = ["cpu@onnxruntime", "cpu@numpy"]
    _, profile, _ = api.profile("squeezenet", targets, tmp_path, settings=FAST)
    profiled = profile.measurement("launch", "cpu@onnxruntime", "profiled")
    wall = profile.measurement("launch", "cpu@onnxruntime", "wall")
    assert profiled is not None and wall is not None
    # a few microseconds on a one-element Relu: within noise of the launch's own wall time
    assert 0.0 < profiled.median_s < 1e-4 and wall.median_s > 0.0 and profiled.runs >= 50
    assert profile.measurement("launch", "cpu@numpy", "profiled") is None  # no such profiler
    # a profile saved before this row existed gets its launch re-measured, and nothing else
    older = Profile(profile.meta, profile.table[profile.table["key"] != "profiled"])
    resolved = [resolve(target, discover()) for target in targets]
    jobs = plan_jobs(api.load("squeezenet"), resolved, older)[0]
    assert [(job.kind, job.target) for job in jobs] == [("launch", "cpu@onnxruntime")]
