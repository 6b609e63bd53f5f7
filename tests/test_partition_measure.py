"""Candidate partitions measured whole: keyed by subgraph, priced from the measurement, reused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from autopart import api
from autopart.costmodel.costs import Costs, PartitionKey, node_precisions
from autopart.costmodel.measurements import RowKind
from autopart.costmodel.partitions import measured_partitions, partition_key
from autopart.ir.target import VirtualDevice
from autopart.profile import Profile, Profiler, kinds, machine_profile_path
from autopart.targets.devices import discover
from autopart.tuning.options import TuneOptions
from autopart.tuning.workflow import tune_model
from tests.test_profile import FAST, tiny_cnn, tiny_path  # noqa: F401 - fixture

ORT = VirtualDevice.parse("cpu@onnxruntime")


def test_the_key_names_the_subgraph_its_weights_and_how_it_is_compiled() -> None:
    graph = api.load(tiny_cnn())
    whole = partition_key(graph, graph.nodes, alone=True)
    assert whole.endswith(":alone")  # made in memory: no model as shipped to compile
    assert partition_key(graph, graph.nodes[:2], alone=True).endswith(":alone")
    assert whole == partition_key(api.load(tiny_cnn()), api.load(tiny_cnn()).nodes, True)
    assert whole != partition_key(graph, graph.nodes, alone=False)
    assert whole != partition_key(graph, graph.nodes[:2], alone=True)
    changed = tiny_cnn()
    weight = changed.graph.initializer[0]
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) + 1, weight.name))
    assert whole != partition_key(api.load(changed), api.load(changed).nodes, alone=True)


def _weighted_model(weight: np.ndarray, names: list[str] | None = None) -> onnx.ModelProto:
    """y = x + w; with ``names``, also whether string input s equals those constant strings."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    inits = [numpy_helper.from_array(weight, "w")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(weight.shape))]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(weight.shape))]
    if names is not None:
        inits.append(numpy_helper.from_array(np.array(names, dtype=object), "labels"))
        nodes.append(helper.make_node("Equal", ["s", "labels"], ["same"]))
        inputs.append(helper.make_tensor_value_info("s", TensorProto.STRING, [len(names)]))
        outputs.append(helper.make_tensor_value_info("same", TensorProto.BOOL, [len(names)]))
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_the_graph_hash_reads_weights_in_place_and_strings_by_value() -> None:
    """A string constant's array holds pointers: hashed by them, two loads of one model
    hashed apart; a weight hashed by ``tobytes`` was copied whole."""
    import tracemalloc

    from autopart.ir.hashing import graph_hash

    weight = np.random.default_rng(1).standard_normal((1024, 1024)).astype(np.float32)
    graphs = [api.load(_weighted_model(weight, ["cat", "dog"])) for _ in range(2)]
    tracemalloc.start()
    first = graph_hash(graphs[0])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < weight.nbytes / 4
    assert first == graph_hash(graphs[1])
    assert first != graph_hash(api.load(_weighted_model(weight, ["cat", "cow"])))


def test_the_key_covers_every_weight_byte_and_string_without_copying_the_weights() -> None:
    import tracemalloc

    weight = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)  # 16 MiB
    graph = api.load(_weighted_model(weight, ["cat", "dog"]))
    tracemalloc.start()
    key = partition_key(graph, graph.nodes, alone=True)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < weight.nbytes / 4  # the export once held two copies of every weight
    assert key == partition_key(api.load(_weighted_model(weight, ["cat", "dog"])),
                                api.load(_weighted_model(weight, ["cat", "dog"])).nodes, True)  # fmt: skip
    nudged = weight.copy()
    nudged.flat[-1] = np.nextafter(nudged.flat[-1], np.float32(np.inf))
    for other in (_weighted_model(nudged, ["cat", "dog"]), _weighted_model(weight, ["cat", "cow"]),
                  _weighted_model(weight)):  # fmt: skip
        assert key != partition_key(api.load(other), api.load(other).nodes, alone=True)
    scalar = api.load(_weighted_model(np.float32(2.0).reshape(())))
    assert partition_key(scalar, scalar.nodes, True) != partition_key(
        api.load(_weighted_model(np.float32(3.0).reshape(()))), scalar.nodes, True
    )


def test_a_measured_partition_costs_its_measurement_and_others_their_op_sum() -> None:
    graph = api.load(tiny_cnn())
    names = [node.name for node in graph.nodes]
    costs = Costs(graph, [ORT], {name: {ORT: 1.0} for name in names}, launch={ORT: 0.5},
                  cold={ORT: 0.25})  # fmt: skip
    assert costs.partition_cost(names, ORT) == 0.5 + len(names)
    costs.measured[PartitionKey(tuple(names), ORT, False)] = 0.125
    assert costs.partition_cost(names, ORT) == 0.125
    assert costs.partition_cost(names, ORT, split=True) == 0.125 + 0.25  # cold entry on top
    assert costs.partition_cost(names, ORT, alone=True) == 0.5 + len(names)  # not measured so
    assert costs.partition_cost(names[:2], ORT) == 0.5 + 2


def test_a_partition_mixing_precisions_costs_its_measurement_at_those_precisions() -> None:
    graph = api.load(tiny_cnn())
    names = tuple(node.name for node in graph.nodes)
    ov = VirtualDevice.parse("cpu@openvino")
    bf16 = ov.at_precision("bf16")
    each = {name: {ov: 1.0, bf16: 0.5} for name in names}
    costs = Costs(graph, [ov, bf16], each, launch={ov: 0.5, bf16: 0.5})
    first, second = {names[0]: bf16}, {names[1]: bf16}
    assert node_precisions(names, ov, first) == ("bf16",) + ("f32",) * (len(names) - 1)
    assert node_precisions(names, ov, {}) == ()  # one precision: keyed as ever
    costs.measured[PartitionKey(names, ov, False, node_precisions(names, ov, first))] = 0.125
    assert costs.partition_cost(names, ov, node_targets=first) == 0.125
    assert costs.partition_cost(names, ov, node_targets=second) == 0.5 + len(names) - 0.5
    assert costs.partition_cost(names, ov) == 0.5 + len(names)  # f32 throughout: not measured


@pytest.mark.slow
def test_tune_measures_its_candidates_partitions_prices_with_them_and_reuses_them(
    tmp_path: Path,
    tiny_path: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # priced as measured, not scaled to the speed now (tests/test_speed.py tests that)
    monkeypatch.setattr("autopart.tuning.workflow.measure_speed", lambda: None)
    profiles = tmp_path / "profiles"
    api.profile(str(tiny_path), ["cpu@onnxruntime", "cpu@numpy"], profiles, settings=FAST)
    options = TuneOptions(
        targets=["cpu@onnxruntime", "cpu@numpy"], profiles_dir=str(profiles),
        search_dir=str(tmp_path / "search"), rounds=2, peers=False,
        thorough=True,  # no screen: its whole timings would be these partitions' rows
    )  # fmt: skip
    report = tune_model(str(tiny_path), options)
    assert report.partitions_measured is not None and report.partitions_measured.new >= 1
    profile = Profile.load(machine_profile_path(profiles, discover()))
    rows = profile.rows(RowKind.PARTITION)
    assert "cpu@onnxruntime" in set(rows["target"]) <= {"cpu@onnxruntime", "cpu@numpy"}
    graph = api.load(str(tiny_path))
    names = tuple(node.name for node in graph.nodes)
    found = measured_partitions(profile, graph, [PartitionKey(names, ORT, True)])
    single = next(row for row in report.rows if row.name == "single:cpu@onnxruntime")
    # the race's timing of the one-partition plan replaced the measure stage's row ...
    assert single.measured_s is not None
    assert np.isclose(found[PartitionKey(names, ORT, True)], single.measured_s)
    again = tune_model(str(tiny_path), options)
    assert again.partitions_measured is not None
    assert again.partitions_measured.new == 0
    assert again.partitions_measured.reused == report.partitions_measured.new
    # ... and prices that plan in the next tune
    single_again = next(row for row in again.rows if row.name == "single:cpu@onnxruntime")
    assert np.isclose(single_again.predicted_s, single.measured_s)


def test_a_profile_brings_its_measured_partitions_to_a_plan_made_elsewhere(
    tmp_path: Path,
    tiny_path: Path,  # noqa: F811
) -> None:
    """Planning from another machine's profile prices with the partitions it measured."""
    profiles = tmp_path / "profiles"
    api.profile(str(tiny_path), ["cpu@onnxruntime"], profiles, settings=FAST)
    options = TuneOptions(targets=["cpu@onnxruntime"], profiles_dir=str(profiles),
                          search_dir=str(tmp_path / "search"), rounds=2, peers=False)  # fmt: skip
    tune_model(str(tiny_path), options)
    path = machine_profile_path(profiles, discover())
    foreign = Profile.load(path)
    foreign.meta["fingerprint"] = "0" * 16
    other = tmp_path / "other.csv"
    foreign.save(other)
    elsewhere = TuneOptions(
        targets=["cpu@onnxruntime"], profile_file=str(other), search_dir=str(tmp_path / "s2")
    )
    planned = tune_model(str(tiny_path), elsewhere)
    assert planned.planned_only and planned.partitions_measured is None
    graph = api.load(str(tiny_path))
    names = tuple(node.name for node in graph.nodes)
    measured = measured_partitions(Profile.load(other), graph, [PartitionKey(names, ORT, True)])
    single = next(row for row in planned.rows if row.name == "single:cpu@onnxruntime")
    assert np.isclose(single.predicted_s, measured[PartitionKey(names, ORT, True)])


def test_an_onnx_model_with_the_same_subgraph_shares_its_measurement(tmp_path: Path) -> None:
    original = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), str(original))
    first = api.load(str(original))
    copy = tiny_cnn()
    copy.graph.name = "another name"
    path = tmp_path / "copy.onnx"
    onnx.save(copy, str(path))
    second = api.load(str(path))
    assert partition_key(first, first.nodes, True) == partition_key(second, second.nodes, True)


def test_one_partition_plans_and_those_predicted_near_the_quickest_are_measured() -> None:
    from types import SimpleNamespace

    from autopart.search.candidates import CandidateKind
    from autopart.tuning.partitions import worth_measuring
    from autopart.tuning.settings import VERIFY

    def candidate(name: str, seconds: float, partitions: int, fits: bool = True) -> object:
        plan = SimpleNamespace(partitions=[None] * partitions)
        return SimpleNamespace(
            name=name,
            plan=plan,
            fits_memory=fits,
            value=lambda _: seconds,
            kind=CandidateKind.ILP,
            target=None,
        )

    candidates = {
        c.name: c  # type: ignore[attr-defined]
        for c in (
            candidate("quick", 1.0, 1),
            candidate("near", VERIFY.measure_within * 0.99, 2),
            candidate("far", VERIFY.measure_within * 1.01, 2),
            candidate("far alone", VERIFY.measure_within * 5, 1),  # one partition: always measured
            candidate("split", 0.1, VERIFY.measure_max_partitions + 1),  # too split: sets no bar
            candidate("too big", 0.5, 1, fits=False),
        )
    }
    outcome = SimpleNamespace(candidates=candidates, objective="latency")
    assert [c.name for c in worth_measuring(outcome)] == ["quick", "near", "far alone"]  # type: ignore[arg-type]


def test_the_plans_the_peers_stand_for_are_always_measured(tiny_path: Path) -> None:  # noqa: F811
    from autopart.costmodel import costs_from_profile
    from autopart.profile import new_profile
    from autopart.search.planner import search
    from autopart.tuning.partitions import worth_measuring
    from autopart.tuning.settings import VERIFY

    graph = api.load(str(tiny_path))
    targets = ["cpu@onnxruntime", "cpu@numpy"]
    profile = new_profile(discover())
    for target in targets:  # onnxruntime's op sum priced far beyond numpy's
        scale = 1.0 if target == "cpu@numpy" else 10 * VERIFY.measure_within
        for node in graph.nodes:
            from autopart.costmodel.measurements import Measurement
            from autopart.ir.signature import op_signature

            seconds = 1e-3 * scale
            row = Measurement(seconds, seconds, seconds, seconds, seconds, 5)
            profile.record(RowKind.OP, target, op_signature(node, graph), row, node.op_type)
        launch = Measurement(1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 5)
        for key in ("wall", "timed"):
            profile.record(RowKind.LAUNCH, target, key, launch)
    outcome = search(costs_from_profile(graph, profile, targets))
    names = [c.name for c in worth_measuring(outcome)]
    assert "single:cpu@onnxruntime" in names  # onnxruntime alone's configuration


def test_a_partition_its_codegen_rejects_is_marked_and_not_compiled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autopart.errors import TargetError
    from autopart.profile import Profiler, kinds, new_profile

    graph = api.load(tiny_cnn())
    spec = PartitionKey(tuple(n.name for n in graph.nodes), ORT, True)
    attempts = []

    def rejecting(*args: object, **kwargs: object) -> None:
        attempts.append(1)
        raise TargetError("the library rejects it")

    monkeypatch.setattr(kinds, "compiled_with_inputs", rejecting)
    profile = new_profile(discover())
    Profiler(profile, discover(), settings=FAST).profile_partitions(graph, [spec])
    assert len(attempts) == 1  # not once per pass
    key = partition_key(graph, list(graph.nodes), True)
    assert profile.has(RowKind.UNSUPPORTED, str(ORT), key)
    assert measured_partitions(profile, graph, [spec]) == {}
    again = Profiler(profile, discover(), settings=FAST).profile_partitions(graph, [spec])
    assert len(attempts) == 1 and again.reused == 1


@pytest.mark.parametrize(("target", "retaken"), [("cpu@onnxruntime", 1), ("cpu/0@onnxruntime", 0)])
def test_a_whole_device_partition_timed_while_the_cores_shared_one_is_timed_again(
    tiny_path: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    retaken: int,
) -> None:
    """A spell right after the first pass: that pass is timed again, on a whole device only."""
    readings = iter([True])

    class Probe:
        def shared(self) -> bool:
            return next(readings, False)

    monkeypatch.setattr(kinds, "process_probe", Probe)
    collected = []
    real = kinds.collect
    monkeypatch.setattr(kinds, "collect", lambda *args: collected.append(1) or real(*args))
    graph = api.load(str(tiny_path))
    names = tuple(node.name for node in graph.nodes)
    profile = Profile({"fingerprint": "0" * 16})
    Profiler(profile, discover(), settings=FAST).profile_partitions(
        graph, [PartitionKey(names, VirtualDevice.parse(target), True)]
    )
    assert len(collected) == FAST.passes + retaken
    assert len(profile.rows(RowKind.PARTITION)) == 1


@pytest.mark.parametrize(("bound", "released"), [(0, True), (1 << 30, False)])
def test_a_partition_too_large_to_hold_is_freed_before_the_next_compile(
    monkeypatch: pytest.MonkeyPatch, bound: int, released: bool
) -> None:
    """One that the compiled cache cannot hold is dropped and its memory handed back after
    each pass, not carried (through its closures' cycles) into the next one's compile."""
    from dataclasses import replace

    from autopart.profile import samplers

    monkeypatch.setattr(
        samplers, "COMPILED_CACHE", replace(samplers.COMPILED_CACHE, held_weights=bound)
    )
    releases = []
    from autopart.profile import profiler

    monkeypatch.setattr(profiler, "release_freed_memory", lambda: releases.append(1) or True)
    graph = api.load(tiny_cnn())
    spec = PartitionKey(tuple(n.name for n in graph.nodes), ORT, True)
    profile = Profile({"fingerprint": "0" * 16})
    Profiler(profile, discover(), settings=FAST).profile_partitions(graph, [spec])
    assert len(profile.rows(RowKind.PARTITION)) == 1
    assert len(releases) == (FAST.passes if released else 1)  # held: freed after its last
