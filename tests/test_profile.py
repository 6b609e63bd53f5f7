"""The profiler and saved profiles: signatures, store, resume, errors, transfer fits, CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from autopart import api
from autopart.costmodel import Measurement, costs_from_profile
from autopart.costmodel.calibration import (
    calibrate,
    calibration_windows,
    model_tag,
    op_sum,
    window_key,
)
from autopart.costmodel.fusion import fusion_pairs, pairs_to_measure
from autopart.costmodel.measurements import RowKind
from autopart.costmodel.op_costs import op_costs
from autopart.costmodel.transfer import fit_transfer
from autopart.errors import ProfileError
from autopart.ir.graph import Graph
from autopart.ir.signature import op_signature
from autopart.profile import (
    Profile,
    TimingSettings,
    machine_profile_path,
    new_profile,
    open_for_measuring,
)
from autopart.profile.profiler import plan_jobs
from autopart.profile.timing import collect, summarise_passes
from autopart.profile.transfer import SIZES
from autopart.targets.devices import discover
from autopart.targets.resolve import resolve
from tests.conftest import make_model
from tests.opencl_here import SECOND_UNIT_TARGET, needs_opencl
from tests.test_errors import assert_one_line_error, invoke

FAST = TimingSettings(warmup=1, min_runs=3, max_runs=6, batch=3, max_seconds=0.2)
TARGETS = ["cpu@numpy", "cpu/0@onnxruntime", SECOND_UNIT_TARGET]


def tiny_cnn() -> onnx.ModelProto:
    """Two convolutions of equal signature (different weights), a Relu and a residual Add."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), name)
        for name in ("w1", "w2")
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["r1", "c2"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        weights,
    )
    return make_model(graph, 13)


@pytest.fixture()
def tiny_path(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_cnn.onnx"
    onnx.save(tiny_cnn(), str(path))
    return path


def test_equal_ops_share_a_signature_and_others_do_not() -> None:
    graph = api.load(tiny_cnn())
    conv1, relu, conv2, add = graph.nodes
    assert op_signature(conv1, graph) == op_signature(conv2, graph)
    assert op_signature(conv1, graph).startswith('Conv:13 {"pads":[1,1,1,1]} (float32[1x4x8x8],')
    assert "float32[4x4x3x3]c" in op_signature(conv1, graph)  # the weight is a constant
    assert len({op_signature(n, graph) for n in (conv1, relu, add)}) == 3
    resnet = api.load("resnet50")
    assert len({op_signature(n, resnet) for n in resnet.nodes if n.op_type == "Conv"}) < 30


def _measurement(median: float) -> Measurement:
    return Measurement(median, median * 0.9, median * 1.1, median * 0.8, median * 1.5, 9, "wall")


def test_store_round_trip_and_merge_keeps_the_newer_row(tmp_path: Path) -> None:
    machine = discover()
    first = new_profile(machine)
    first.record("op", "cpu@numpy", 'Conv:13 {"a":[1,2]} (x) -> (y)', _measurement(1e-3), "Conv")
    first.record("launch", "cpu@numpy", "wall", _measurement(5e-6))
    path = tmp_path / "p.csv"
    first.save(path)
    text = path.read_text()
    assert text.startswith("# autopart.profile 4\n") and "kind,target,key" in text
    loaded = Profile.load(path)
    assert loaded.measurement("op", "cpu@numpy", 'Conv:13 {"a":[1,2]} (x) -> (y)') == _measurement(
        1e-3
    )
    assert loaded.meta["fingerprint"] == machine.fingerprint()
    assert "numpy" in loaded.meta["versions"]
    time.sleep(1.1)  # measurement times have one-second resolution
    second = Profile.load(path)
    second.record("launch", "cpu@numpy", "wall", _measurement(7e-6))
    merged = loaded.merge(second)
    assert merged.measurement("launch", "cpu@numpy", "wall").median_s == 7e-6  # newer wins
    assert len(merged.rows("op")) == 1
    other = Profile({"fingerprint": "elsewhere"})
    with pytest.raises(ProfileError, match="different machines"):
        loaded.merge(other)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("hello\n", "not an autopart profile"),
        ("# autopart.profile 9\n# {}\nkind\n", "schema version '9'"),
        ("# autopart.profile 1\n# {not json\nkind\n", "corrupt"),
        ("# autopart.profile 1\n# {}\nkind\n", "no machine fingerprint"),
        ('# autopart.profile 1\n# {"fingerprint": "x"}\nkind,target\nop,a\n', "columns"),
    ],
)
def test_corrupt_profiles_are_named_and_never_overwritten(
    tmp_path: Path, tiny_path: Path, content: str, fragment: str
) -> None:
    path = machine_profile_path(tmp_path / "profiles", discover())
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(ProfileError, match=fragment):
        Profile.load(path)
    code, output = invoke(
        "profile", str(tiny_path), "--targets", "cpu@numpy", "--profiles", str(path.parent)
    )
    assert_one_line_error(code, output, str(path))
    assert path.read_text() == content


def test_a_profile_of_another_machine_is_refused_for_measuring(
    tmp_path: Path, tiny_path: Path
) -> None:
    path = machine_profile_path(tmp_path, discover())
    foreign = Profile({"fingerprint": "0123456789abcdef"})
    foreign.record("launch", "gpu:0@cuda", "wall", _measurement(1e-5))
    foreign.save(path)
    before = path.read_text()
    with pytest.raises(ProfileError, match="not on this one"):
        open_for_measuring(path, discover())
    code, output = invoke(
        "profile", str(tiny_path), "--targets", "cpu@numpy", "--profiles", str(tmp_path)
    )
    assert_one_line_error(code, output, "0123456789abcdef", "--profile")
    assert path.read_text() == before


@needs_opencl
def test_profiling_twice_reuses_every_measurement(tmp_path: Path) -> None:
    report, _, path = api.profile(tiny_cnn(), TARGETS, tmp_path, settings=FAST)
    # 3 distinct op signatures (the two convs share one) per target (on opencl, with the
    # host's enqueueing), their layout conversions on onnxruntime, 2 fusion pairs
    # (conv1+relu1, conv2+add) on each of the 2 fusing codegens, 3 launches, and a copy
    # per size each way
    assert report.new == 3 * 3 + 3 + 2 * 2 + 3 + 2 * len(SIZES) and report.reused == 0, report
    fused = Profile.load(path).rows("fused")
    assert len(fused) == 4 and (fused["producer_s"] > 0).all()  # the producer, in turn
    assert len(Profile.load(path).rows("layout")) == 3
    assert set(Profile.load(path).rows("enqueue")["target"]) == {"opencl:0/0@opencl"}
    # copies are sampled for a share of the time budget, past the op settings' max_runs
    # (those of 1 MiB or less: a loaded machine's 64 MiB copy can take the share in fewer)
    most = FAST.passes * FAST.per_pass().max_runs
    copies = Profile.load(path).rows("transfer")
    assert (copies[copies["nbytes"] <= 1 << 20]["runs"] > most).all()
    assert path.exists() and not report.missing
    again, _, _ = api.profile(tiny_cnn(), TARGETS, tmp_path, settings=FAST)
    assert again.new == 0 and again.reused == report.new
    costs = costs_from_profile(api.load(tiny_cnn()), Profile.load(path))
    assert {str(t) for t in costs.targets} == set(TARGETS)
    conv1, conv2 = costs.node_cost["conv1"], costs.node_cost["conv2"]
    assert conv1 == conv2 and all(cost > 0 for cost in conv1.values())
    # (a 1 MiB copy takes about as long as a 4 KiB one swings: compare with 64 MiB)
    assert costs.transfer("cpu", "opencl:0", 64 << 20) > costs.transfer("cpu", "opencl:0", 4096)


@needs_opencl  # the job count includes copies to the OpenCL device
def test_a_spent_budget_leaves_measurements_missing_and_a_rerun_completes(
    tmp_path: Path,
) -> None:
    jobs = 3 * 3 + 3 + 2 * 2 + 3 + 2 * len(SIZES)  # as in the test above
    report, _, _ = api.profile(tiny_cnn(), TARGETS, tmp_path, budget_s=0.0, settings=FAST)
    assert report.new == 0 and report.missing == jobs
    graph = api.load(tiny_cnn())
    with pytest.raises(ProfileError, match="run `autopart profile"):
        costs_from_profile(graph, Profile(new_profile(discover()).meta), TARGETS)
    report, _, _ = api.profile(tiny_cnn(), TARGETS, tmp_path, settings=FAST)
    assert report.new == jobs and report.missing == 0


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    """The tiny CNN profiled in full on TARGETS (FAST settings)."""
    _, profile, _ = api.profile(tiny_cnn(), TARGETS, tmp_path_factory.mktemp("cut"), settings=FAST)
    return profile


@needs_opencl
@settings(max_examples=60, deadline=None)
@given(
    cuts=st.dictionaries(
        st.sampled_from([kind.value for kind in RowKind]), st.sampled_from([0, 1, 2]), max_size=2
    )
)
def test_a_profile_cut_anywhere_prices_or_says_what_it_lacks(
    tiny_profile: Profile, cuts: dict[str, int]
) -> None:
    """A budget or an interrupt can stop any kind of measurement part way: pricing from
    what is left gives costs, or a ProfileError naming what is missing, never another
    exception (a device pair's copies timed at one size once crashed the fit). Each kind
    cut keeps that many of its first rows on each target."""
    table = tiny_profile.table
    parts = [
        rows.iloc[: cuts.get(str(kind), len(rows))]
        for (kind, _), rows in table.groupby(["kind", "target"], sort=False)
    ]
    cut = Profile(dict(tiny_profile.meta), pd.concat(parts).reset_index(drop=True))
    graph = api.load(tiny_cnn())
    for targets in (TARGETS, [TARGETS[0], TARGETS[-1]]):
        try:
            costs = costs_from_profile(graph, cut, targets)
        except ProfileError:
            continue
        assert {str(t) for t in costs.targets} == set(targets)


_KILLED_RUN = """
import sys
from autopart import api
from autopart.profile import TimingSettings
# every step samples for 0.15 s, so that a pass of the 13 jobs spans about 2 s
settings = TimingSettings(warmup=1, min_runs=3, max_runs=100_000, batch=3, max_seconds=1.0,
                          min_seconds=0.45)
api.profile(sys.argv[1], ["cpu@numpy", "cpu/0@onnxruntime"], sys.argv[2], budget_s=60.0,
            settings=settings, checkpoint_s=0.0)
"""


def _passes(profile: Profile) -> dict[tuple[str, str, str], int]:
    rows = profile.table
    return {
        (kind, target, key): int(passes)
        for kind, target, key, passes in zip(
            rows["kind"], rows["target"], rows["key"], rows["passes"], strict=True
        )
    }


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_a_killed_run_leaves_a_readable_profile_and_the_rerun_measures_only_incomplete_rows(
    tmp_path: Path, tiny_path: Path, how: signal.Signals
) -> None:
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(_KILLED_RUN))
    store = tmp_path / "profiles"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    process = subprocess.Popen([sys.executable, str(script), str(tiny_path), str(store)], env=env)
    path = machine_profile_path(store, discover())
    deadline = time.monotonic() + 120
    seen: set[int] = set()
    # kill in the last pass: some rows have all 3 passes in, others not yet
    while time.monotonic() < deadline and process.poll() is None and not {2, 3} <= seen:
        time.sleep(0.05)
        if path.exists():
            passes = _passes(Profile.load(path))
            seen = {n for (kind, *_), n in passes.items() if kind != "fused"}
    assert process.poll() is None, "the profiling run ended before it could be killed"
    os.kill(process.pid, how)
    process.wait(timeout=60)
    killed = Profile.load(path)  # readable whatever the moment of the kill
    before = _passes(killed)
    complete = {row for row, n in before.items() if n == 3 or row[0] == "fused"}
    partial = set(before) - complete
    assert complete and partial
    report, _, _ = api.profile(tiny_cnn(), ["cpu@numpy", "cpu/0@onnxruntime"], store, settings=FAST)
    assert report.new > 0 and report.reused > 0 and report.missing == 0
    assert report.new + report.reused == 3 * 2 + 3 + 2 + 2  # ops, layouts, pairs, launches
    assert report.resumed == report.new  # every job cut short had a pass in: none from scratch
    after = Profile.load(path)
    assert all(after.complete(kind, target, key, 3) for kind, target, key in partial)
    for row in complete:  # kept as the killed run left them
        assert _same(after.row(*row), killed.row(*row)), row
    for row in partial:  # given the passes they lacked, their samples kept with the new ones
        old, new = killed.row(*row), after.row(*row)
        assert old is not None and new is not None and old["partial"] and not new["partial"]
        assert new["runs"] > old["runs"] and new["min_s"] <= old["min_s"], row


def _same(row: dict[str, object] | None, other: dict[str, object] | None) -> bool:
    """Whether two profile rows hold the same values (empty reference columns alike)."""
    return row is not None and other is not None and pd.Series(row).equals(pd.Series(other))


def test_transfer_fit_recovers_latency_and_bandwidth_and_finds_regimes() -> None:
    sizes = np.array([4096 * 4**k for k in range(8)], dtype=float)
    times = 20e-6 + sizes / 10e9
    fit = fit_transfer(sizes, times)
    assert fit.model.latency_s == pytest.approx(20e-6, rel=1e-3)
    assert fit.model.bandwidth_bps == pytest.approx(10e9, rel=1e-3)
    assert fit.max_relative_error < 1e-6 and not fit.model.regimes
    two = np.where(sizes < 4e6, 20e-6 + sizes / 30e9, sizes / 5e9)  # caches, then DRAM
    fit = fit_transfer(sizes, two)
    assert fit.max_relative_error < 0.01 and len(fit.model.regimes) == 1
    assert fit.model.cost(64 << 20) == pytest.approx((64 << 20) / 5e9, rel=0.01)


def test_profiled_copy_sizes_place_a_cache_knee_between_4_and_16_mib() -> None:
    # copies on this machine leave the caches between 4 and 16 MiB; with 4 and 16 MiB the
    # nearest sizes profiled, 10 MB copies were priced at the slow regime's 1.4-1.5x
    sizes = np.array(SIZES, dtype=float)
    knee = 12 << 20

    def copy_time(nbytes: np.ndarray | float) -> np.ndarray:
        return np.where(nbytes < knee, 60e-6 + nbytes / 18e9, nbytes / 9e9)

    fit = fit_transfer(sizes, copy_time(sizes))
    for nbytes in (10_000_000, 24_000_000, 48_000_000):
        assert fit.model.cost(nbytes) == pytest.approx(float(copy_time(nbytes)), rel=0.2)


def test_cli_profile_reports_new_and_reused(tmp_path: Path, tiny_path: Path) -> None:
    args = ["profile", str(tiny_path), "--targets", "cpu@numpy,cpu/1@onnxruntime"]
    code, output = invoke(*args, "--profiles", str(tmp_path))
    assert code == 0, output
    text = " ".join(output.split())
    # 3 ops x 2 targets, their 3 layout conversions and 2 fusion pairs on onnxruntime,
    # 2 launches
    assert "13 new measurements, 0 reused" in text and "launch" in text
    assert "cold entry" in text and "0.00 ms" in text  # 3 ops: no windows, nothing measured
    code, output = invoke(*args, "--profiles", str(tmp_path))
    assert code == 0 and "0 new measurements, 13 reused" in " ".join(output.split()), output
    # a profile taken in a slow spell, say: every timing 1 s, a day old
    path = next(tmp_path.glob("*.csv"))
    saved = Profile.load(path)
    table = saved.table.assign(median_s=1.0, measured_at="2026-01-01T00:00:00+00:00")
    Profile(saved.meta, table).save(tmp_path / "stale.csv")
    os.replace(tmp_path / "stale.csv", path)
    code, output = invoke(*args, "--profiles", str(tmp_path), "--refresh")
    assert code == 0 and "13 new measurements, 0 reused" in " ".join(output.split()), output
    after, table = (t[t["kind"] != RowKind.SPEED.value] for t in (Profile.load(path).table, table))
    assert sorted(after["key"]) == sorted(table["key"])  # the same rows, each measured again
    assert (after["median_s"] < 1.0).all() and (after["measured_at"] > "2026-01-01").all()
    code, output = invoke("profile", str(tiny_path), "--targets", "opencl:7@opencl")
    assert_one_line_error(code, output, "opencl:7", "devices:")


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 120), st.integers(0, 2**32 - 1), st.floats(0.0, 0.5))
def test_calibration_windows_are_disjoint_supported_and_sized(
    count: int, seed: int, unsupported: float
) -> None:
    graph = api.load(_relu_chain(count))
    rng = np.random.default_rng(seed)
    runnable = {node.name: bool(rng.random() >= unsupported) for node in graph.nodes}
    windows = calibration_windows(graph, lambda node: runnable[node.name])
    if count < 12:
        assert windows == []
        return
    width = min(max(count // 8, 2), 40)
    assert len(windows) <= 3 and windows == sorted(windows)
    for (start, end), following in zip(windows, [*windows[1:], (count, count)], strict=False):
        assert end - start == width and start >= 0 and end <= following[0]
        assert all(runnable[node.name] for node in graph.nodes[start:end])
    if unsupported == 0.0:
        assert len(windows) == 3


def _relu_chain(count: int) -> onnx.ModelProto:
    names = ["x"] + [f"v{i}" for i in range(count)]
    nodes = [
        helper.make_node("Relu" if i % 2 else "Sigmoid", [names[i]], [names[i + 1]], name=f"n{i}")
        for i in range(count)
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [1, 64])],
    )
    return make_model(graph, 13)


def _timed_relu_chain() -> tuple[Graph, Profile]:
    """24 Relus, each timed at 30 µs whole on cpu@numpy, entering which takes 10 µs."""
    graph = api.load(_relu_chain(24))
    profile = Profile({"fingerprint": "test"})
    op = Measurement(30e-6, 29e-6, 31e-6, 28e-6, 40e-6, 9, "wall")
    for node in graph.nodes:
        profile.record("op", "cpu@numpy", op_signature(node, graph), op)
    profile.record("launch", "cpu@numpy", "wall", _measurement(12e-6))
    profile.record("launch", "cpu@numpy", "timed", Measurement(10e-6, 0, 0, 0, 0, 9, "wall"))
    return graph, profile


def test_calibration_rows_scale_the_op_costs_of_their_target() -> None:
    graph, profile = _timed_relu_chain()
    plain = costs_from_profile(graph, profile, calibration="off")
    assert plain.node_cost["n0"][plain.targets[0]] == pytest.approx(20e-6)  # 30 µs less entry
    assert calibrate(profile, graph, "cpu@numpy").source == "none"
    window = graph.nodes[4:7]
    reference = op_sum(profile, graph, window, "cpu@numpy")
    assert reference == pytest.approx(10e-6 + 3 * 20e-6)
    # windows ran in 10 µs entry + 45 µs (and 48 µs), where the ops sum to 60 µs
    other = api.load(tiny_cnn())
    for end, body in ((3, 45e-6), (4, 48e-6)):
        measured = Measurement(10e-6 + body, 0, 0, 0, 0, 9, "wall")
        profile.record("calibration", "cpu@numpy", window_key(other, 0, end), measured,
                       predicted_s=reference)  # fmt: skip
    found = calibrate(profile, graph, "cpu@numpy")
    assert found.source == "other models" and found.applied
    assert found.factor == pytest.approx((0.75 + 0.8) / 2)
    assert found.op_sum_error == pytest.approx((60 / 45 + 60 / 48) / 2 - 1)
    # the planned model's own windows take precedence over other models'
    for start, body in ((4, 90e-6), (8, 93e-6), (12, 84e-6)):
        measured = Measurement(10e-6 + body, 0, 0, 0, 0, 9, "wall")
        profile.record("calibration", "cpu@numpy", window_key(graph, start, start + 3),
                       measured, predicted_s=reference)  # fmt: skip
    own = calibrate(profile, graph, "cpu@numpy")
    assert own.source == "model" and own.windows == 3 and own.factor == pytest.approx(1.5)
    scaled = costs_from_profile(graph, profile, calibration="on")
    for node in graph.nodes:
        target = scaled.targets[0]
        assert scaled.node_cost[node.name][target] == pytest.approx(
            1.5 * plain.node_cost[node.name][target]
        )
    assert scaled.launch == plain.launch
    assert not own.gross  # the op sum is off by a third: noise, maybe
    assert costs_from_profile(graph, profile).node_cost == plain.node_cost
    # windows that disagree (one on each side of 1, or far apart) correct nothing
    slow = Measurement(10e-6 + 30e-6, 0, 0, 0, 0, 9, "wall")
    profile.record(
        "calibration", "cpu@numpy", window_key(graph, 16, 19), slow, predicted_s=reference
    )
    mixed = calibrate(profile, graph, "cpu@numpy")
    assert mixed.windows == 4 and not mixed.applied and mixed.factor == 1.0
    assert costs_from_profile(graph, profile, calibration="on").node_cost == plain.node_cost


def test_op_sums_grossly_off_in_agreeing_windows_are_scaled_by_default() -> None:
    graph, profile = _timed_relu_chain()
    plain = costs_from_profile(graph, profile, calibration="off")
    # three ops summing to 60 µs ran in 22-26 µs inside one subgraph: 2.5x over
    for start, body in ((4, 24e-6), (8, 22e-6), (12, 26e-6)):
        measured = Measurement(10e-6 + body, 0, 0, 0, 0, 9, "wall")
        profile.record("calibration", "cpu@numpy", window_key(graph, start, start + 3),
                       measured, predicted_s=70e-6)  # fmt: skip
    found = calibrate(profile, graph, "cpu@numpy")
    assert found.gross and found.factor == pytest.approx(0.4)
    assert found.factor_for("off") == 1.0 and found.factor_for("gross") == found.factor_for("on")
    scaled = costs_from_profile(graph, profile)
    target = scaled.targets[0]
    for node in graph.nodes:
        assert scaled.node_cost[node.name][target] == pytest.approx(
            0.4 * plain.node_cost[node.name][target]
        )
    with pytest.raises(ValueError, match="calibration mode"):
        found.factor_for("sometimes")
    # windows 2x apart agree where every one of them puts the op sum off by over half ...
    for start, body in ((4, 8e-6), (8, 16e-6), (12, 12e-6)):
        measured = Measurement(10e-6 + body, 0, 0, 0, 0, 9, "wall")
        profile.record("calibration", "cpu@numpy", window_key(graph, start, start + 3),
                       measured, predicted_s=70e-6)  # fmt: skip
    assert calibrate(profile, graph, "cpu@numpy").factor == pytest.approx(0.2)
    # ... and not where one of them is within half of it
    measured = Measurement(10e-6 + 45e-6, 0, 0, 0, 0, 9, "wall")
    profile.record(
        "calibration", "cpu@numpy", window_key(graph, 12, 15), measured, predicted_s=70e-6
    )
    assert not calibrate(profile, graph, "cpu@numpy").applied


def test_profiling_times_calibration_windows_and_reuses_them(tmp_path: Path) -> None:
    target = "cpu/0@onnxruntime"
    report, profile, _ = api.profile("squeezenet", [target], tmp_path, settings=FAST)
    graph = api.load("squeezenet")
    rows = profile.rows("calibration", target)
    assert len(rows) == 3 and all(rows["key"].str.startswith(model_tag(graph) + "["))
    for row in rows.itertuples():
        start, end = (int(part) for part in row.key.rsplit("[", 1)[1].rstrip("]").split(":"))
        assert end - start == len(graph.nodes) // 8
        expected = op_sum(profile, graph, graph.nodes[start:end], target)
        assert row.predicted_s == pytest.approx(expected) and row.median_s > 0
    (calibration,) = report.calibrations
    assert calibration.source == "model" and calibration.windows == 3
    assert 0.2 <= calibration.factor <= 5.0
    again, _, _ = api.profile("squeezenet", [target], tmp_path, settings=FAST)
    assert again.new == 0 and again.reused == report.new


@needs_opencl
def test_ops_a_target_cannot_run_are_marked_and_left_out_of_its_costs(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Where", ["mask", "r", "x"], ["y"], name="where"),
    ]
    mask = numpy_helper.from_array(rng.random((1, 16)) > 0.5, "mask")
    graph = helper.make_graph(
        nodes,
        "masked",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [mask],
    )
    targets = ["cpu@numpy", "opencl:0/0@opencl"]
    report, profile, path = api.profile(make_model(graph, 13), targets, tmp_path, settings=FAST)
    assert report.unsupported == 1 and len(profile.rows("unsupported")) == 1
    costs = costs_from_profile(api.load(make_model(graph, 13)), Profile.load(path))
    assert {str(t) for t in costs.node_cost["where"]} == {"cpu@numpy"}
    assert {str(t) for t in costs.node_cost["relu"]} == set(targets)


def test_fusion_pairs_are_light_sole_readers_of_their_producer() -> None:
    graph = api.load(tiny_cnn())
    pairs = fusion_pairs(graph)
    assert {name: (p.producer.name, p.index) for name, p in pairs.items()} == {
        "relu1": ("conv1", 0),
        "add": ("conv2", 1),  # r1, its other input, has two readers
    }
    resnet = api.load("resnet50")
    for pair in fusion_pairs(resnet).values():
        value = resnet.value(pair.consumer.inputs[pair.index])
        assert value.producer is pair.producer and value.consumers == [pair.consumer]
        assert pair.consumer.op_type not in ("Conv", "Gemm", "MatMul")
    assert len(pairs_to_measure(resnet)) < len(fusion_pairs(resnet)) / 3


def test_fused_consumers_cost_what_the_pair_adds_and_their_class_follows() -> None:
    graph = api.load(_conv_relu_stack(3))
    target = "cpu@onnxruntime"
    profile = Profile({"fingerprint": "test"})
    timed = Measurement(10e-6, 0, 0, 0, 0, 9, "wall")
    profile.record("launch", target, "wall", _measurement(12e-6))
    profile.record("launch", target, "timed", timed)
    for node in graph.nodes:
        median = 110e-6 if node.op_type == "Conv" else 40e-6
        profile.record("op", target, op_signature(node, graph), _measurement(median))
    pairs = fusion_pairs(graph)
    measured = pairs_to_measure(graph, per_class=1)
    assert len(pairs) == 3 and len(measured) == 1  # three equal-class pairs, one timed
    # Conv alone 110 µs, Conv+Relu 115 µs: the Relu adds 5 µs of its 30 µs alone
    profile.record("fused", target, measured[0].key(graph), _measurement(115e-6))
    costs = costs_from_profile(graph, profile, calibration="off").node_cost
    (vd,) = costs["conv0"]
    assert costs["conv0"][vd] == pytest.approx(100e-6)
    timed_relu = measured[0].consumer.name
    assert costs[timed_relu][vd] == pytest.approx(5e-6)
    for name in pairs:  # the other Relus differ in shape, so by class ratio: 30 µs x 1/6
        if name != timed_relu:
            assert costs[name][vd] == pytest.approx(5e-6)


def test_a_fused_consumer_is_charged_beyond_its_producer_timed_in_turn_with_the_pair() -> None:
    graph = api.load(_conv_relu_stack(1))
    target = "cpu@onnxruntime"
    profile = Profile({"fingerprint": "test"})
    profile.record("launch", target, "timed", Measurement(10e-6, 0, 0, 0, 0, 9, "wall"))
    conv, relu = graph.nodes
    profile.record("op", target, op_signature(conv, graph), _measurement(110e-6))
    profile.record("op", target, op_signature(relu, graph), _measurement(40e-6))
    (pair,) = pairs_to_measure(graph)
    # the Conv job ran in a quick spell; in the pair's job the Conv took 130 us, the pair 131
    profile.record("fused", target, pair.key(graph), _measurement(131e-6), producer_s=130e-6)
    costs = op_costs(profile, graph, target, base=10e-6)
    assert costs.seconds[relu.name] == pytest.approx(1e-6)
    assert costs.unfused[relu.name] == pytest.approx(29e-6)


def test_fusion_pairs_take_one_pass_with_the_whole_budget(tmp_path: Path) -> None:
    labels: list[str] = []
    settings = replace(FAST, min_runs=5, max_runs=5, batch=5)  # per pass: 3 runs

    def progress(done: int, total: int, label: str) -> None:
        labels.append(label)

    _, profile, _ = api.profile(
        tiny_cnn(), ["cpu/0@onnxruntime"], tmp_path, progress=progress, settings=settings
    )
    pairs = [label for label in labels if "+" in label]
    ops = [label for label in labels if label.startswith("Conv on")]
    assert pairs and all(label.endswith("(1/3)") for label in pairs)
    assert {label[-5:] for label in ops} == {"(1/3)", "(2/3)", "(3/3)"}
    fused = profile.rows("fused")
    assert (fused["runs"] == 5).all()  # the whole budget's runs in its one pass
    assert (profile.rows("op")["runs"] == 3 * 3).all()


def test_fused_rows_without_their_producer_timed_in_turn_are_measured_again(
    tmp_path: Path,
) -> None:
    graph = api.load(tiny_cnn())
    resolved = [resolve("cpu@onnxruntime", discover())]
    _, profile, _ = api.profile(tiny_cnn(), ["cpu@onnxruntime"], tmp_path, settings=FAST)
    assert not plan_jobs(graph, resolved, profile)[0]
    (key, *_) = profile.rows("fused")["key"]
    old = profile.measurement("fused", "cpu@onnxruntime", key)
    assert old is not None
    profile.record("fused", "cpu@onnxruntime", key, old)  # as profiles before the pairing
    (job,) = plan_jobs(graph, resolved, profile)[0]
    assert (job.kind, job.key) == ("fused", key)


def _conv_relu_stack(count: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, weights, previous = [], [], "x"
    for i in range(count):
        weights.append(numpy_helper.from_array(
            rng.standard_normal((4 + i, 3 + i if i else 3, 1, 1)).astype(np.float32), f"w{i}"
        ))  # fmt: skip
        nodes += [
            helper.make_node("Conv", [previous, f"w{i}"], [f"c{i}"], name=f"conv{i}"),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"),
        ]
        previous = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "stack",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, 3 + count, 8, 8])],
        weights,
    )
    return make_model(graph, 13)


def test_the_entry_taken_off_never_exceeds_the_cheapest_op() -> None:
    graph = api.load(_relu_chain(2))  # a Sigmoid, then a Relu
    profile = Profile({"fingerprint": "test"})
    sigmoid, relu = graph.nodes
    profile.record("op", "cpu@onnxruntime", op_signature(sigmoid, graph), _measurement(15e-6))
    profile.record("op", "cpu@onnxruntime", op_signature(relu, graph), _measurement(30e-6))
    costs = op_costs(profile, graph, "cpu@onnxruntime", base=20e-6)  # a probe timed high
    assert costs.seconds == {sigmoid.name: 0.0, relu.name: pytest.approx(15e-6)}
    assert op_costs(profile, graph, "cpu@onnxruntime", base=5e-6).seconds[relu.name] == (
        pytest.approx(25e-6)
    )


def test_layout_conversions_of_one_op_subgraphs_are_taken_off_wall_timings() -> None:
    graph = api.load(_relu_chain(2))
    profile = Profile({"fingerprint": "test"})
    sigmoid, relu = graph.nodes
    for node, seconds in ((sigmoid, 40e-6), (relu, 30e-6)):
        profile.record("op", "cpu@onnxruntime", op_signature(node, graph), _measurement(seconds))
    layout = Measurement(12e-6, 11e-6, 13e-6, 10e-6, 14e-6, 9, "event")
    profile.record("layout", "cpu@onnxruntime", op_signature(sigmoid, graph), layout)
    costs = op_costs(profile, graph, "cpu@onnxruntime", base=5e-6)
    assert costs.seconds == {
        sigmoid.name: pytest.approx(40e-6 - 5e-6 - 12e-6),
        relu.name: pytest.approx(30e-6 - 5e-6),  # no layout row: nothing more taken off
    }
    # never below the op's own kernels, timed in the same runs as the conversions
    big = Measurement(30e-6, 29e-6, 31e-6, 28e-6, 32e-6, 9, "event")
    profile.record("layout", "cpu@onnxruntime", op_signature(relu, graph), big, kernel_s=4e-6)
    assert op_costs(profile, graph, "cpu@onnxruntime", base=5e-6).seconds[relu.name] == (
        pytest.approx(4e-6)
    )


@needs_opencl
def test_an_event_timed_op_costs_at_least_what_the_host_takes_to_enqueue_it(
    tmp_path: Path,
) -> None:
    target = "opencl:0/0@opencl"
    _, profile, path = api.profile(tiny_cnn(), [target], tmp_path, settings=FAST)
    graph = api.load(tiny_cnn())
    enqueue = profile.rows("enqueue", target)
    assert len(enqueue) == 3 and (enqueue["median_s"] > 0).all()
    assert (enqueue["timer"] == "wall").all()
    (vdev,) = costs_from_profile(graph, profile, [target]).targets
    signature = op_signature(graph.node("conv1"), graph)
    kernel = profile.measurement("op", target, signature)
    assert kernel is not None and kernel.timer == "event"
    profile.record("enqueue", target, signature, _measurement(kernel.median_s / 2))
    quick_host = costs_from_profile(graph, profile, [target]).node_cost["conv1"][vdev]
    assert quick_host == pytest.approx(kernel.median_s)
    profile.record("enqueue", target, signature, _measurement(kernel.median_s + 1e-3))
    slow_host = costs_from_profile(graph, profile, [target]).node_cost["conv1"][vdev]
    assert slow_host == pytest.approx(kernel.median_s + 1e-3)
    # a profile without enqueue rows measures its event-timed ops again, and only those
    profile.table = profile.table[profile.table["kind"] != "enqueue"].reset_index(drop=True)
    path.unlink()  # saving merges with the file, which still holds the rows
    profile.save(path)
    again, profile, _ = api.profile(tiny_cnn(), [target], tmp_path, settings=FAST)
    assert again.new == 3 and len(profile.rows("enqueue", target)) == 3


class _Clock:
    """A sampler whose runs take ``seconds`` of a fake clock, counting its calls."""

    def __init__(self, seconds: float, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 0.0
        self.calls = 0
        self.seconds = seconds
        monkeypatch.setattr("autopart.profile.timing.time.perf_counter", lambda: self.now)

    def __call__(self) -> float:
        self.calls += 1
        self.now += self.seconds
        return self.seconds


def test_cheap_samples_are_taken_for_at_least_min_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = TimingSettings(warmup=2, min_runs=3, max_runs=10_000, batch=3, min_seconds=0.05)
    clock = _Clock(1e-4, monkeypatch)
    samples = collect(clock, settings)
    assert len(samples) >= 0.05 / 1e-4 - 2  # about 500 runs, not the 6 a settled median needs
    plain = collect(_Clock(1e-4, monkeypatch), replace(settings, min_seconds=0.0))
    assert len(plain) == 6


def test_copies_and_launches_sample_for_a_share_of_the_budget_spread_over_passes() -> None:
    copies = TimingSettings(max_seconds=0.9, max_runs=60).for_short_runs()
    assert copies.min_seconds == pytest.approx(0.27) and copies.max_runs >= 3000
    assert copies.per_pass().min_seconds == pytest.approx(0.09)
    assert TimingSettings().min_seconds == 0.0


def test_slow_subgraphs_stop_warming_up_after_a_twelfth_of_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = TimingSettings(warmup=8, min_runs=3, max_runs=3, batch=3, max_seconds=0.4)
    slow = _Clock(0.06, monkeypatch)
    collect(slow, settings)
    assert slow.calls == 2 + 3  # warm-up stopped past 0.4 / 12 s, after the second run
    fast = _Clock(1e-4, monkeypatch)
    collect(fast, settings)
    assert fast.calls == 8 + 3


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(1e-4, 1e-3), min_size=3, max_size=8),
    st.lists(st.floats(1e-4, 1e-3), min_size=3, max_size=8),
    st.floats(1.1, 3.0),
)
def test_a_pass_taken_in_a_slow_spell_moves_the_median_no_further_than_the_others(
    first: list[float], second: list[float], slowdown: float
) -> None:
    slow = [value * slowdown + 1e-3 for value in second]  # all above the other two passes
    measured = summarise_passes([first, slow, second], "wall")
    low, high = sorted([float(np.median(first)), float(np.median(second))])
    assert low <= measured.median_s <= high
    assert measured.runs == len(first) + 2 * len(second)
    assert measured.max_s == max(slow) and measured.min_s == min(first + second)
    assert summarise_passes([first], "wall").median_s == pytest.approx(np.median(first))


def test_checkpoints_take_at_most_a_tenth_of_the_profilers_time_however_slow_saving_is(
    tmp_path: Path, tiny_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autopart.profile.profiler import SAVE_SHARE

    saves: list[float] = []
    save = Profile.save

    def slow_save(self: Profile, path: str | Path) -> None:  # a profile of tens of MB
        began = time.perf_counter()
        time.sleep(0.05)
        save(self, path)
        saves.append(time.perf_counter() - began)

    monkeypatch.setattr(Profile, "save", slow_save)
    began = time.perf_counter()
    api.profile(str(tiny_path), ["cpu@numpy"], tmp_path / "p", settings=FAST, checkpoint_s=1e-3)
    elapsed = time.perf_counter() - began
    assert len(saves) >= 2  # checkpoints were taken, not only the final save
    checkpoints = sum(saves[:-1])  # the last is the final save, owed whatever it costs
    assert checkpoints <= SAVE_SHARE * elapsed + saves[0]
