"""`autopart tune`, `autopart bench` and planning for another machine, end to end."""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest

import autopart
from autopart.plan.schema import Plan
from autopart.profile import Profile, machine_profile_path
from autopart.targets.devices import discover
from autopart.tuning.options import TuneOptions
from autopart.tuning.workflow import tune_model
from tests.opencl_here import SECOND_UNIT_TARGET, needs_opencl
from tests.test_errors import assert_one_line_error, invoke
from tests.test_profile import FAST, tiny_cnn, tiny_path  # noqa: F401 - fixture

TARGETS = f"cpu@onnxruntime,cpu/0@onnxruntime,cpu/1@onnxruntime,{SECOND_UNIT_TARGET}"


@pytest.fixture()
def profiled(tmp_path: Path, tiny_path: Path) -> tuple[Path, Path]:  # noqa: F811
    """A profile of the tiny model on TARGETS (fast settings), and the model path."""
    from autopart import api

    api.profile(str(tiny_path), TARGETS.split(","), tmp_path / "profiles", settings=FAST)
    return tmp_path / "profiles", tiny_path


def test_tune_saves_a_verified_plan_with_prediction_and_report(
    tmp_path: Path, profiled: tuple[Path, Path]
) -> None:
    profiles, model = profiled
    out = tmp_path / "plan.json"
    code, output = invoke(
        "tune", str(model), "--targets", TARGETS, "--profiles", str(profiles),
        "--search-dir", str(tmp_path / "search"), "--rounds", "6", "-o", str(out),
    )  # fmt: skip
    assert code == 0, output
    first, text = output, " ".join(output.split())
    assert "0 new measurements" in text and "single:cpu@onnxruntime" in text and "ilp" in text
    plan = Plan.load(out)
    assert plan.predicted is not None and plan.measured is not None
    assert plan.predicted.makespan_s and plan.predicted.makespan_s > 0
    assert plan.measured.max_error is not None and plan.measured.max_error < 1e-3
    assert set(plan.predicted.node_costs) == set(plan.assignment)
    directory = next((tmp_path / "search").iterdir())
    assert {"plan.json", "report.json", "report.csv"} <= {p.name for p in directory.iterdir()}
    report = pd.read_csv(directory / "report.csv")
    assert {"single:cpu@onnxruntime", "ilp", "heft"} <= set(report["name"])
    unraced = report.loc[report["measured_s"].isna(), "name"]
    assert all(f"{name} (" in text for name in unraced)  # each left out says so, with why
    # the peers ran at their defaults in the same rounds, and the ratio is shown
    assert "peers as installed: onnxruntime alone" in text and "chosen / best peer" in text
    saved = json.loads((directory / "report.json").read_text())
    peers = saved["peers"]
    assert "onnxruntime alone" in peers and all(s > 0 for s in peers.values())
    assert f"chosen / best peer: {saved['vs_best_peer']:.2f}x" in text  # the ratio shown, kept
    assert saved["best_peer"] in peers
    code, output = invoke("run", str(out), "--repeat", "1", "--check")
    assert code == 0 and "(ok)" in output, output
    # not a terminal: one line per stage, with its counts and seconds
    assert re.search(r"^verify: \d+/\d+ steps in [\d.]+ s$", first, re.M), first
    assert "kept " in text and "paired rounds" in text  # the choice and its evidence


def test_the_stage_log_prints_a_line_per_stage_and_a_heartbeat_in_long_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from autopart.cli.common import StageLog

    with StageLog() as log:
        log.heartbeat_s = log.quiet_below_s = 0.0  # every update is "long ago"
        profile = log.add_task("x", stage="profile")
        log.update(profile, completed=3, total=10, description="Conv on cpu@numpy")
        log.update(profile, completed=10, total=10, description="done")
        verify = log.add_task("y", stage="verify")
        log.update(verify, completed=1, total=None, description="running ilp")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("profile: 3/10 steps, 0 s so far: Conv on cpu@numpy")
    assert re.match(r"profile: 10/10 steps in [\d.]+ s", lines[-3])
    assert lines[-2].startswith("verify: 1 steps, 0 s so far: running ilp")
    assert re.match(r"verify: 1 steps in [\d.]+ s", lines[-1])


@pytest.mark.slow
def test_tune_notes_a_target_its_profile_is_far_off_on_and_how_to_measure_it_again(
    tmp_path: Path, profiled: tuple[Path, Path]
) -> None:
    profiles, model = profiled
    path = next(profiles.glob("*.csv"))
    saved = Profile.load(path)  # as if cpu/0's ops were profiled in a very slow spell
    slow = (saved.table["kind"] == "op") & (saved.table["target"] == "cpu/0@onnxruntime")
    table = saved.table.assign(median_s=saved.table["median_s"].where(~slow, 0.05))
    Profile(saved.meta, table).save(tmp_path / "slow.csv")
    os.replace(tmp_path / "slow.csv", path)
    report = autopart.tune(
        str(model), targets=TARGETS.split(","), profiles_dir=profiles,
        search_dir=tmp_path / "search", rounds=1, thorough=True,  # the screen drops cpu/0
    )  # fmt: skip
    (note,) = [note for note in report.notes if "--refresh" in note]
    assert "cpu/0@onnxruntime" in note and "measured (+" in note
    assert f"autopart profile {model} --targets " in note
    saved_notes = json.loads((report.directory / "report.json").read_text())["notes"]
    assert note in saved_notes


@pytest.mark.slow
def test_makespan_objective_runs_the_tuner_seeded_by_every_baseline(
    tmp_path: Path, profiled: tuple[Path, Path]
) -> None:
    profiles, model = profiled
    options = TuneOptions.build(
        targets=TARGETS.split(","), objective="makespan", budget_s=3.0,
        profiles_dir=profiles, search_dir=tmp_path / "search", rounds=1,
    )  # fmt: skip
    report = tune_model(str(model), options)
    tuned = report.outcome.optuna
    assert tuned is not None and tuned.trials >= len(report.outcome.candidates) - 1
    # on the search's own prices (before the measure stage priced partitions whole)
    assert tuned.best_seed_value is not None
    assert tuned.value_s <= tuned.best_seed_value + 1e-12
    assert (report.directory / "study.db").exists()  # resumable


def _foreign_copy(profile_path: Path, destination: Path) -> Path:
    """This machine's profile, relabelled as another machine whose device is opencl:5."""
    profile = Profile.load(profile_path)
    table = profile.table.assign(
        target=profile.table["target"].str.replace("opencl:0", "opencl:5", regex=False)
    )
    meta = json.loads(json.dumps(profile.meta).replace("opencl:0", "opencl:5"))
    foreign = Profile({**meta, "fingerprint": "feedfacecafebeef"}, table)
    destination.write_text(foreign.to_text())
    return destination


@needs_opencl
def test_profile_of_another_machine_plans_without_running(
    tmp_path: Path, profiled: tuple[Path, Path]
) -> None:
    profiles, model = profiled
    foreign = _foreign_copy(machine_profile_path(profiles, discover()), tmp_path / "other.csv")
    before = foreign.read_text()
    out = tmp_path / "plan.json"
    code, output = invoke(
        "tune", str(model), "--profile", str(foreign), "--search-dir", str(tmp_path / "s"),
        "-o", str(out), "--pin", "Conv#1=opencl:5/0@opencl",
    )  # fmt: skip
    assert code == 0, output
    assert "nothing was run" in " ".join(output.split())
    plan = Plan.load(out)
    assert plan.measured is None and plan.predicted.profile == "feedfacecafebeef"
    assert plan.assignment["conv1"] == "opencl:5/0@opencl"
    assert foreign.read_text() == before
    code, output = invoke("run", str(out), "--repeat", "1")
    assert_one_line_error(code, output, "opencl:5")


@pytest.mark.slow
@needs_opencl
def test_a_single_target_plan_that_falls_back_says_how_many_nodes_run_elsewhere(
    tmp_path: Path,
) -> None:
    from onnx import TensorProto, helper, numpy_helper

    from autopart import api

    tiny = tiny_cnn()  # an OpenCL target cannot run Pad: its single-target plan falls back
    pads = numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")
    tiny.graph.initializer.append(pads)
    tiny.graph.node.append(helper.make_node("Pad", ["y", "pads"], ["padded"], name="pad"))
    del tiny.graph.output[:]
    tiny.graph.output.append(
        helper.make_tensor_value_info("padded", TensorProto.FLOAT, [1, 4, 10, 10])
    )
    model = tmp_path / "padded.onnx"
    onnx.save(tiny, str(model))
    targets = "cpu@onnxruntime,opencl:0/0@opencl"
    profiles = tmp_path / "profiles"
    api.profile(str(model), targets.split(","), profiles, settings=FAST)
    # --thorough: the screen would drop the slower OpenCL plan unraced
    code, output = invoke(
        "tune", str(model), "--targets", targets, "--profiles", str(profiles),
        "--search-dir", str(tmp_path / "search"), "--rounds", "1", "--thorough",
    )  # fmt: skip
    assert code == 0, output
    text = " ".join(output.split())
    assert "single:opencl:0/0@opencl (+1 node on the fallback)" in text
    assert "single:cpu@onnxruntime (+" not in text
    report = pd.read_csv(next((tmp_path / "search").iterdir()) / "report.csv")
    off = dict(zip(report["name"], report["off_target_nodes"], strict=True))
    assert off["single:opencl:0/0@opencl"] == 1 and off["single:cpu@onnxruntime"] == 0
    output, table = _bench(model, targets, profiles, tmp_path / "search", rounds=1)
    assert "single:opencl:0/0@opencl (+1 node on the fallback)" in " ".join(output.split())
    table = table.set_index("plan")
    assert table.loc["single:opencl:0/0@opencl", "off_target_nodes"] == 1
    assert table.loc["onnxruntime alone", "off_target_nodes"] == 0


def _bench(
    model: Path, targets: str, profiles: Path, search: Path, rounds: int
) -> tuple[str, pd.DataFrame]:
    """Run ``autopart bench`` on ``model``; its output and its CSV (written beside ``search``)."""
    csv = search.parent / "bench.csv"
    code, output = invoke(
        "bench", str(model), "--targets", targets, "--profiles", str(profiles),
        "--rounds", str(rounds), "--csv", str(csv), "--search-dir", str(search),
    )  # fmt: skip
    assert code == 0, output
    return output, pd.read_csv(csv)


def test_bad_tune_input_is_one_line_and_keeps_saved_state(
    tmp_path: Path, profiled: tuple[Path, Path]
) -> None:
    profiles, model = profiled
    saved = {p: p.read_text() for p in profiles.iterdir()}
    common = ["--targets", TARGETS, "--profiles", str(profiles), "--search-dir", str(tmp_path)]
    code, output = invoke("tune", str(model), *common, "--pin", "Conv=gpu:0@cuda")
    assert_one_line_error(code, output, "gpu:0@cuda")
    code, output = invoke("tune", str(model), *common, "--pin", "Relu#9=cpu@onnxruntime")
    assert_one_line_error(code, output, "Relu#9")
    code, output = invoke(
        "tune", str(model), *common, "--pin", "name:conv1=cpu/0@onnxruntime",
        "--forbid", "name:conv1=cpu",
    )  # fmt: skip
    assert_one_line_error(code, output, "conv1")
    code, output = invoke("tune", str(model), *common, "--profile", str(tmp_path / "none.csv"))
    assert_one_line_error(code, output, "none.csv")
    assert saved == {p: p.read_text() for p in profiles.iterdir()}


def test_a_constraint_that_cannot_hold_fails_before_anything_is_measured(
    tmp_path: Path,
    tiny_path: Path,  # noqa: F811
) -> None:
    from autopart.errors import AutopartError
    from autopart.search.constraints import Constraints
    from autopart.tuning.options import TuneOptions
    from autopart.tuning.workflow import tune_model

    profiles = tmp_path / "profiles"
    stages: list[str] = []
    for pin in ("Relu#9=cpu@onnxruntime", "Conv=cpu/0@onnxruntime"):
        options = TuneOptions.build(
            targets=TARGETS.split(","),
            profiles_dir=profiles,
            search_dir=tmp_path / "search",
            constraints=Constraints.from_cli(pins=[pin], forbids=["Conv=cpu"]),
        )
        with pytest.raises(AutopartError):
            tune_model(str(tiny_path), options, progress=lambda stage, *_: stages.append(stage))
    assert set(stages) <= {"import", "targets"} and not list(profiles.rglob("*.csv"))  # untimed


@pytest.mark.slow
def test_bench_times_the_peer_every_single_target_baselines_and_the_tuned_plan(
    tmp_path: Path, profiled: tuple[Path, Path], variant_peers_run: None
) -> None:
    profiles, model = profiled
    _, table = _bench(model, TARGETS, profiles, tmp_path / "s", rounds=2)
    plans = set(table["plan"])
    assert {"onnxruntime alone", "autopart (tuned)", "ort-ep-rule", "heft", "per-op-best"} <= plans
    assert {f"single:{t}" for t in TARGETS.split(",")} <= plans
    singles = table[table["kind"] == "single"]
    assert set(singles["target"]) == set(TARGETS.split(","))
    assert set(table.loc[table["plan"] == "onnxruntime alone", "kind"]) == {"peer"}
    peer = table[table["plan"] == "onnxruntime alone"].iloc[0]
    assert peer["vs_onnxruntime"] == pytest.approx(1.0)
    # the three peers as installed; every row's ratio to the best within the tolerance
    kinds = table.set_index("plan")["kind"]
    assert {kinds["openvino alone"], kinds["openvino alone f32"]} == {"peer"}
    peer_rows = table[table["kind"] == "peer"]
    best = peer_rows[peer_rows["within_budget"]].set_index("plan")["median_ms"].min()
    best_name = peer_rows[peer_rows["median_ms"] == best]["plan"].iloc[0]
    assert table.set_index("plan").loc[best_name, "vs_best_peer"] == pytest.approx(1.0)
    # over the rounds both ran (test_choice checks paired_ratio), inside its own interval
    timed = table[table["runs"] > 0]
    assert (timed["vs_best_peer"] > 0).all()
    assert (timed["vs_best_peer_low"] <= timed["vs_best_peer"] * (1 + 1e-9)).all()
    assert (timed["vs_best_peer"] <= timed["vs_best_peer_high"] * (1 + 1e-9)).all()
    assert table.loc[table["plan"] == "openvino alone", "vs_openvino"].iloc[0] == pytest.approx(1.0)
    # f32 plans match the reference; the budget is OpenVINO as installed's error (+10%)
    as_installed = table.set_index("plan").loc["openvino alone"]
    tolerance = table["budget"].iloc[0]
    assert (table["budget"] == tolerance).all()
    assert tolerance == pytest.approx(max(1e-3, 1.1 * as_installed["max_rel_error"]), rel=1e-3)
    quantised = table["plan"].isin(["onnxruntime + qdq int8", "openvino + nncf int8"])
    assert table.loc[~quantised, "within_budget"].all()  # int8 on random inputs: 1e-1 off
    assert (table["metric"] == "max-rel").all()
    assert (table["metric_drop"] == table["max_rel_error"]).all()
    exact = table[~table["plan"].isin(["openvino alone"]) & ~quantised]
    assert (exact["max_rel_error"] < 1e-3).all()  # TARGETS are all f32
    assert json.loads(json.dumps(table.to_dict()))  # plain data only
    # a plan equal to another (the tuned plan is often a single target) is timed once
    twins = table[table["same_plan_as"].fillna("") != ""]
    for row in twins.itertuples():
        original = table[table["plan"] == row.same_plan_as].iloc[0]
        assert row.median_ms == original["median_ms"] and row.partitions == original["partitions"]
    assert "ort-ep-rule" in set(twins["plan"]) or "ort-ep-rule" in set(twins["same_plan_as"])
    # the tuned plan is timed twice, compiled apart: the gap is the run's noise floor
    tuned = table.set_index("plan").loc[["autopart (tuned)", "autopart (tuned, timed again)"]]
    assert list(tuned["kind"]) == ["chosen", "chosen-again"]
    floor = table["noise_floor"].unique()  # over their paired rounds: test_choice
    assert len(floor) == 1 and 0.0 <= floor[0] < np.inf
    spread = table["noise_spread"].unique()
    assert np.isnan(spread[0]) or floor[0] <= spread[0] + 1e-12  # the spread reaches the gap
    # the reach of their ratio's interval: one value, no upper bound (two rounds on a
    # loaded CI machine reached 1.10), NaN when the two rounds asked were not stretched to
    # VERIFY.min_paired_rounds; its meaning is tested on set timings in test_choice
    assert len(spread) == 1 and (np.isnan(spread[0]) or spread[0] >= 0.0)
    both = table.dropna(subset=["vs_best_peer_low"])
    assert (both["vs_best_peer_low"] <= both["vs_best_peer_high"]).all()
    # a single target's codegen (and its fallback's where it ran nodes); none for a peer
    codegens = table["codegens"].fillna("")
    for row, names in zip(table.itertuples(), codegens, strict=True):
        if row.kind == "single":
            own = row.target.split("@")[1]
            assert own in names.split("+") and (row.off_target_nodes > 0 or names == own)
        assert (names == "") == (row.kind == "peer")


@pytest.mark.slow
def test_bench_with_room_for_two_plans_beside_the_peers_measures_every_plan_in_heats(
    tmp_path: Path, profiled: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from autopart.errors import AutopartError
    from autopart.targets.registry import declared_peers
    from autopart.tuning import verify

    room = len(declared_peers(available=True)) + 2  # every peer and two plans fit

    def room_for_two(nbytes: int, what: str) -> None:
        held = re.search(r"beside the (\d+) runners", what)
        if held is not None and int(held.group(1)) >= room:
            raise AutopartError(f"{what} needs {nbytes} bytes, more than are available")

    monkeypatch.setattr(verify, "check_fits", room_for_two)
    profiles, model = profiled
    _, table = _bench(model, TARGETS, profiles, tmp_path / "s", rounds=2)
    rows = table.set_index("plan")
    tuned = rows.loc[["autopart (tuned)", "autopart (tuned, timed again)"]]
    assert (tuned["runs"] > 0).all() and np.isfinite(tuned["noise_floor"]).all()
    assert (table["runs"] > 0).all()  # never more than two plans compiled at once


@needs_opencl
def test_a_plans_codegens_are_its_partitions_distinct_codegens(tiny_path: Path) -> None:  # noqa: F811
    from autopart import api
    from autopart.tuning.bench import plan_codegens

    plan, _ = api.make_plan(str(tiny_path), ["Conv=opencl:0/0@opencl"], "cpu/0@onnxruntime")
    assert len(plan.partitions) == 4  # conv, relu, conv, add alternating
    assert plan_codegens(plan) == "onnxruntime+opencl"
    plan, _ = api.make_plan(str(tiny_path), ["Relu=cpu/1@onnxruntime"], "cpu/0@onnxruntime")
    assert len(plan.partitions) == 3 and plan_codegens(plan) == "onnxruntime"


def test_quick_plans_get_more_rounds_until_the_timed_rounds_fill_the_minimum() -> None:
    from autopart import api
    from autopart.ir.feeds import random_inputs
    from autopart.tuning.settings import VERIFY
    from autopart.tuning.verify import measure_plans, stretched

    plan, graph = api.make_plan(tiny_cnn(), fallback="cpu@numpy")
    feeds = random_inputs(graph, 0)
    exact = measure_plans(graph, {"numpy": plan}, feeds, rounds=3, min_timed_s=0.0)
    assert len(exact["numpy"].round_medians) == 3
    longer = measure_plans(graph, {"numpy": plan}, feeds, rounds=3, min_timed_s=0.5)
    assert 3 < len(longer["numpy"].round_medians) <= 3 * VERIFY.max_round_stretch
    assert stretched(10, round_s=0.5, min_timed_s=2.0) == 10  # slow models keep their rounds
    assert stretched(10, round_s=0.01, min_timed_s=2.0) == 10 * VERIFY.max_round_stretch
    assert stretched(10, round_s=0.05, min_timed_s=2.0) == 40


def test_quick_plans_run_in_blocks_that_settle_before_they_are_timed() -> None:
    import time

    from autopart import api
    from autopart.ir.feeds import random_inputs
    from autopart.runtime.executor import Executor
    from autopart.tuning.settings import VERIFY
    from autopart.tuning.verify import Block, block_for, measure_plans

    assert block_for(0.05) == Block(settle=1, timed=1)  # a slow plan: once untimed, once timed
    assert block_for(VERIFY.unsettled_from_s) == Block(settle=0, timed=1)  # the switch is lost
    quick = block_for(2e-4)
    assert quick.settle >= 2 and quick.timed >= 10
    # a few-ms plan needs several runs, not a few ms, to reach its steady time
    assert block_for(2e-3).settle == VERIFY.settle_runs > 2
    _, graph = api.make_plan(tiny_cnn(), fallback="cpu@numpy")
    feeds = random_inputs(graph, 0)
    outputs = Executor(graph).run(feeds).outputs
    last_caller: list[str] = [""]

    def peer(name: str):  # type: ignore[no-untyped-def]
        def run(_feeds: object) -> dict[str, object]:
            # the first run after another runner pays a switch-in cost, as caches do; a
            # sleep lasts at least as long as asked, so a switch-in run takes >= 50 ms
            time.sleep(0.05 if last_caller[0] != name else 0.0002)
            last_caller[0] = name
            return outputs

        return run

    measured = measure_plans(
        graph, {}, feeds, rounds=4, min_timed_s=0.0, peers={"a": peer("a"), "b": peer("b")}
    )
    for result in measured.values():
        assert len(result.round_medians) == 4
        # blocks of several timed runs (how many follows the first runs' speed: on a loaded
        # machine a 0.2 ms runner measured 1 ms once, and its blocks held 4)
        assert len(result.latencies) % 4 == 0 and len(result.latencies) >= 4 * 2
        # the switch-in runs were not timed (a loaded CI machine stretched a 0.2 ms sleep
        # to 5 ms once, so the bound is the switch-in's own floor, not a tight one)
        assert max(result.latencies) < 0.05


def test_a_plan_is_compiled_for_the_race_only_while_memory_is_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dataclasses import replace

    from autopart import api, limits
    from autopart.ir.feeds import random_inputs
    from autopart.settings import COMMON
    from autopart.tuning import verify

    plan, graph = api.make_plan(tiny_cnn(), fallback="cpu@numpy")
    feeds = random_inputs(graph, 0)
    weights = graph.parameter_bytes()
    compiled: list[object] = []
    real = verify.PlanExecutor

    def counting(*args: object) -> object:
        compiled.append(args)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(verify, "PlanExecutor", counting)
    roomy = replace(COMMON, compile_headroom=1000.0)  # more than running the model needs
    monkeypatch.setattr(verify, "COMMON", roomy)
    left = int(roomy.compile_headroom * weights) - 1  # one byte short of the headroom
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: left)
    failures: dict[str, str] = {}
    measured = verify.measure_plans(
        graph, {"a": plan, "b": plan}, feeds, rounds=2, min_timed_s=0.0, failures=failures
    )
    assert not compiled  # refused before compiling, not killed while compiling
    assert set(failures) == {"a", "b"} and "compiling a beside the 0 runners" in failures["a"]
    assert all(not m.latencies for m in measured.values())
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: left + 1)
    measured = verify.measure_plans(graph, {"a": plan}, feeds, rounds=2, min_timed_s=0.0)
    assert compiled and len(measured["a"].round_medians) == 2


def test_contested_plans_race_on_alone_in_batches_of_rounds() -> None:
    from autopart import api
    from autopart.ir.feeds import random_inputs
    from autopart.runtime.executor import Executor
    from autopart.tuning.verify import measure_plans

    _, graph = api.make_plan(tiny_cnn(), fallback="cpu@numpy")
    feeds = random_inputs(graph, 0)
    outputs = Executor(graph).run(feeds).outputs
    peers = {name: (lambda _feeds: outputs) for name in ("a", "b", "c")}
    looks: list[dict[str, int]] = []

    def race(so_far):  # type: ignore[no-untyped-def]
        looks.append({name: len(m.round_medians) for name, m in so_far.items()})
        return ["b", "a", "unknown"]  # names that are not runners are ignored

    measured = measure_plans(
        graph, {}, feeds, rounds=4, min_timed_s=0.0, peers=dict(peers), race=race,
        race_batches=2,
    )  # fmt: skip
    assert [len(measured[n].round_medians) for n in "abc"] == [12, 12, 4]
    assert looks == [{"a": 4, "b": 4, "c": 4}, {"a": 8, "b": 8, "c": 4}]

    settled = measure_plans(graph, {}, feeds, rounds=4, min_timed_s=0.0, peers=peers,
                            race=lambda _: ["a"])  # fmt: skip
    assert {len(m.round_medians) for m in settled.values()} == {4}


def test_the_report_notes_which_plans_raced() -> None:
    from autopart.tuning.plan_rows import race_note
    from autopart.tuning.verify import Measured

    def rounds(count: int) -> Measured:
        return Measured(latencies=[1.0] * count, round_medians=[1.0] * count)

    twins = {"ilp": "ilp", "single:a": "single:a", "single:b": "single:b", "heft": "ilp"}
    measured = {name: rounds(10) for name in twins}
    assert race_note(measured, twins) == []
    measured["ilp"] = measured["heft"] = measured["single:a"] = rounds(30)
    assert race_note(measured, twins) == [
        "ilp and single:a raced on for 20 more rounds: their lead was unclear"
    ]


def test_the_report_notes_single_targets_whose_profile_is_far_off_the_measurement() -> None:
    from autopart.ir.target import VirtualDevice
    from autopart.search.candidates import CandidateKind, candidate_name
    from autopart.tuning.plan_rows import PlanRow, drift_note

    def row(
        kind: CandidateKind, target: str | None, predicted_ms: float, measured_ms: float | None
    ) -> PlanRow:
        measured = None if measured_ms is None else measured_ms * 1e-3
        where = None if target is None else VirtualDevice.parse(target)
        name = candidate_name(kind, where)
        return PlanRow(
            name, kind, predicted_ms * 1e-3, measured, None, 1, 0, {}, None, target=where
        )  # fmt: skip

    single = CandidateKind.SINGLE

    # resnet50 in one bench: its cpu@onnxruntime ops were profiled in a slow spell
    rows = [
        row(single, "cpu@onnxruntime", 56.14, 45.84),
        row(single, "cpu/0@onnxruntime", 78.0, 76.1),
        row(CandidateKind.ILP, None, 40.0, 60.0),  # a split plan's error: the cost model's
        row(single, "opencl:0@opencl", 20.0, None),  # not measured (planned only)
    ]
    (note,) = drift_note(rows, "resnet50")
    assert "cpu@onnxruntime 56.14 ms predicted, 45.84 measured (+22%)" in note
    assert "cpu/0" not in note and "opencl" not in note
    assert "autopart profile resnet50 --targets cpu@onnxruntime --refresh" in note
    assert drift_note(rows[1:], "resnet50") == []
    # a 20 us model 30% off is one launch's swing, not a profile to take again
    assert drift_note([row(single, "cpu@onnxruntime", 0.026, 0.020)], "conv") == []
    assert drift_note([row(single, "cpu@onnxruntime", 0.26, 0.20)], "conv") != []
    # the table priced the plan as timed whole (19.82 ms); its ops summed to 32.47 ms
    timed_whole = [row(single, "cpu@openvino:bf16", 19.82, 19.91)]
    (note,) = drift_note(timed_whole, "resnet50", {"single:cpu@openvino:bf16": 32.47e-3})
    assert "32.47 ms summed over its ops, 19.82 ms timed whole (the price the search used)" in note
    assert "19.91 measured (+63%)" in note and "ms predicted" not in note
    assert "quicker together than apart" in note and "--refresh" not in note  # fusion, no drift
    # timed whole and off too: drift, with the command that measures again
    both_off = [row(single, "cpu@openvino:bf16", 30.0, 19.91)]
    (note,) = drift_note(both_off, "resnet50", {"single:cpu@openvino:bf16": 32.47e-3})
    assert "30.00 ms timed whole" in note and "--refresh" in note and "together" not in note
    # the library's other unit runs the ops 1.5x quicker together, this one 15x: its op rows
    units = [
        row(single, "cpu/0@onnxruntime", 20.0, 20.0),
        row(single, "cpu/1@onnxruntime", 20.0, 20.0),
    ]
    sums = {"single:cpu/0@onnxruntime": 300e-3, "single:cpu/1@onnxruntime": 30e-3}
    drift, fusion = drift_note(units, "resnet50", sums)
    assert "cpu/0@onnxruntime 300.00 ms summed" in drift and "--targets cpu/0@onnxruntime " in drift
    assert "cpu/1@onnxruntime 30.00 ms summed" in fusion and "cpu/0" not in fusion
    alike = {"single:cpu/0@onnxruntime": 33e-3, "single:cpu/1@onnxruntime": 30e-3}
    assert all("--refresh" not in note for note in drift_note(units, "resnet50", alike))
    # ops summed below the whole timing are no fusion: their rows are off
    (note,) = drift_note(units[:1], "resnet50", {"single:cpu/0@onnxruntime": 10e-3})
    assert "10.00 ms summed" in note and "--refresh" in note and "together" not in note


def test_onnxruntime_alone_in_parallel_mode_gives_the_same_outputs(tiny_path: Path) -> None:  # noqa: F811
    from autopart import api
    from autopart.ir.feeds import random_inputs
    from autopart.targets.onnxruntime.peer import onnxruntime_alone

    feeds = random_inputs(api.load(str(tiny_path)), 0)
    plain = onnxruntime_alone(str(tiny_path))(feeds)
    parallel = onnxruntime_alone(str(tiny_path), parallel=True)(feeds)
    assert plain.keys() == parallel.keys() == {"y"}
    np.testing.assert_allclose(parallel["y"], plain["y"], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_the_python_api_tunes_and_benches_as_the_commands_do(
    tmp_path: Path, profiled: tuple[Path, Path]
) -> None:
    profiles, model = profiled
    search = tmp_path / "search"
    common = {"targets": TARGETS.split(","), "profiles_dir": profiles, "search_dir": search}
    with pytest.raises(TypeError):
        autopart.tune(str(model), budget=1.0, **common)  # the option is budget_s
    report = autopart.tune(str(model), rounds=1, **common)
    assert report.plan_path == report.directory / "plan.json" and report.plan_path.is_file()
    assert "onnxruntime alone" in report.peers and report.peers["onnxruntime alone"].correct
    chosen = report.measured[report.chosen]
    best = min((m for m in report.peers.values() if m.correct), key=lambda m: m.median_s)
    mine = dict(zip(chosen.round_indices, chosen.round_medians, strict=True))
    shared = [index for index in best.round_indices if index in mine]  # the rounds both ran
    paired = [(mine[i], best.round_medians[best.round_indices.index(i)]) for i in shared]
    expected = np.median([a for a, _ in paired]) / np.median([b for _, b in paired])
    assert len(paired) >= 1 and report.vs_best_peer == pytest.approx(expected)
    for peer in report.peers.values():  # a peer beyond the tolerance is no bar
        peer.tolerance = peer.max_error / 2 if peer.max_error > 0 else -1.0
    assert report.vs_best_peer is None
    elsewhere = {**common, "search_dir": tmp_path / "search-no-peers"}  # keep report's plan
    alone = autopart.tune(str(model), rounds=1, peers=False, **elsewhere)
    assert alone.peers == {} and alone.vs_best_peer is None
    kinds = {row.name: row.kind for row in report.rows}
    assert report.screening is not None  # every target kept by the screen is searched
    assert {name for name, kind in kinds.items() if kind.value == "single"} == {
        f"single:{t}" for t in report.screening.kept
    }
    table = autopart.bench(str(model), rounds=1, **common)
    assert set(table["model"]) == {str(model)}
    tuned = table[table["plan"] == "autopart (tuned)"].iloc[0]
    assert tuned["kind"] == "chosen"
    assert tuned["predicted_ms"] == pytest.approx(report.plan.predicted.makespan_s * 1e3)


def test_a_peer_that_rejects_the_model_is_left_out_with_a_note(
    monkeypatch: pytest.MonkeyPatch,
    tiny_path: Path,  # noqa: F811
    variant_peers_run: None,
) -> None:
    from autopart.targets.openvino import peer as openvino_peer
    from autopart.tuning.peers import peers

    def rejects(model: object, inputs: object = None, f32: bool = False) -> object:
        raise RuntimeError("Exception from src/x.cpp:1:\nunsupported op Foo")

    monkeypatch.setattr(openvino_peer, "openvino_alone", rejects)
    monkeypatch.setattr(openvino_peer.library, "HAVE_OPENVINO", True)
    tools = {"onnxruntime + qdq int8", "openvino + nncf int8"}  # quantisers: another test
    runners, notes = peers(str(tiny_path), skip=tools)
    assert list(runners) == ["onnxruntime alone"]
    assert notes == [
        "openvino alone could not run this model: unsupported op Foo",
        "openvino alone f32 could not run this model: unsupported op Foo",
    ]


def test_a_peer_that_fails_on_a_run_is_dropped_with_its_reason_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
    tiny_path: Path,  # noqa: F811
) -> None:
    """A peer built may still fail to run (onnxruntime's QuantizeLinear on a model shipped
    quantised): the rounds drop it with one line, and the plans are measured on."""
    import dataclasses

    from autopart.errors import ExecutionError
    from autopart.ir.feeds import random_inputs
    from autopart.tuning import peers as peers_module
    from autopart.tuning.verify import measure_plans

    (real,) = [
        p for p in peers_module.declared_peers(available=True) if p.name == "onnxruntime alone"
    ]

    def build(model: object, inputs: object = None) -> object:
        def run(feeds: object) -> object:
            raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : while running QuantizeLinear")

        return run

    broken = dataclasses.replace(real, build=build)
    monkeypatch.setattr(peers_module, "declared_peers", lambda available=False: [broken])
    runners, notes = peers_module.peers(str(tiny_path))
    assert notes == [] and list(runners) == ["onnxruntime alone"]
    graph = autopart.load(str(tiny_path))
    feeds = random_inputs(graph, 0)
    with pytest.raises(ExecutionError, match=r"^\[ONNXRuntimeError\] .*QuantizeLinear$"):
        runners["onnxruntime alone"](feeds)
    plan, _ = autopart.api.make_plan(graph, fallback="cpu@numpy")
    failures: dict[str, str] = {}
    measured = measure_plans(graph, {"plan": plan}, feeds, 2, peers=runners, failures=failures)
    assert measured["plan"].latencies and "onnxruntime alone" not in measured
    assert failures["onnxruntime alone"].endswith("while running QuantizeLinear")


def test_a_failed_run_of_onnxruntime_alone_logs_nothing_to_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The error comes back as the exception, reported in one line; onnxruntime's own log
    of it would be a second, unasked line on stderr."""
    from autopart.errors import ExecutionError
    from autopart.tuning.peers import peers

    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Reshape", ["x", "shape"], ["y"])], "bad_reshape",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [6]),
         onnx.helper.make_tensor_value_info("shape", onnx.TensorProto.INT64, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    found, _ = peers(model, only="onnxruntime alone")
    capfd.readouterr()
    with pytest.raises(ExecutionError):
        found["onnxruntime alone"]({"x": np.ones(6, np.float32), "shape": np.array([4])})
    assert capfd.readouterr().err == ""


def test_a_single_target_plan_on_onnxruntime_is_compiled_as_onnxruntime_alone_is(
    tiny_path: Path,  # noqa: F811
) -> None:
    """The plan's only session has the peer's options: it cannot lose to it for settings."""
    from autopart.ir.target import VirtualDevice
    from autopart.plan.build import build_plan_for
    from autopart.runtime.plan_executor import PlanExecutor
    from autopart.tuning.peers import peer_model

    graph = autopart.load(str(tiny_path))
    ort = VirtualDevice.parse("cpu@onnxruntime")
    plan = build_plan_for(graph, {n.name: ort for n in graph.nodes}, ort, "whole")
    with PlanExecutor(plan, graph) as executor:
        (step,) = executor.steps.values()
        ours = step.compiled.session.get_session_options()  # type: ignore[union-attr]
        import onnxruntime

        peer = onnxruntime.InferenceSession(
            peer_model(str(tiny_path)).SerializeToString(), providers=["CPUExecutionProvider"]
        ).get_session_options()
        for field in (
            "intra_op_num_threads",
            "inter_op_num_threads",
            "execution_mode",
            "graph_optimization_level",
            "enable_cpu_mem_arena",
            "enable_mem_pattern",
        ):
            assert getattr(ours, field) == getattr(peer, field), field


@pytest.mark.parametrize("peer_name", ["openvino alone", "openvino alone f32"])
def test_a_single_target_plan_on_openvino_is_compiled_as_openvino_alone_is(
    tiny_path: Path,  # noqa: F811
    peer_name: str,
    variant_peers_run: None,
) -> None:
    """The plan the peer stands for has every property of the peer's compiled model.

    OpenVINO as installed is compiled with no properties at all, its f32 peer with the f32
    hint alone; the plan is the whole-device target at the peer's precision.
    """
    from autopart.ir.target import VirtualDevice
    from autopart.plan.build import build_plan_for
    from autopart.runtime.plan_executor import PlanExecutor
    from autopart.targets.openvino import library
    from autopart.tuning.peers import peer_precision, peers

    if not library.HAVE_OPENVINO:
        pytest.skip("OpenVINO is not installed")
    graph = autopart.load(str(tiny_path))
    ov = VirtualDevice.parse("cpu@openvino").at_precision(peer_precision(peer_name))
    plan = build_plan_for(graph, {n.name: ov for n in graph.nodes}, ov, "whole")
    assert len(plan.partitions) == 1
    peer_runner, _ = peers(str(tiny_path))
    assert peer_name in peer_runner
    settings = {"INFERENCE_PRECISION_HINT": "f32"} if peer_name.endswith("f32") else {}
    peer = library.core().compile_model(library.read_onnx(tiny_path.read_bytes()), "CPU", settings)
    with PlanExecutor(plan, graph) as executor:
        (step,) = executor.steps.values()
        ours = step.compiled.model  # type: ignore[union-attr]
        for key in ("INFERENCE_PRECISION_HINT", "PERFORMANCE_HINT", "NUM_STREAMS",
                    "INFERENCE_NUM_THREADS", "ENABLE_CPU_PINNING", "ENABLE_HYPER_THREADING",
                    "SCHEDULING_CORE_TYPE", "EXECUTION_MODE_HINT"):  # fmt: skip
            assert str(ours.get_property(key)) == str(peer.get_property(key)), key


def test_every_round_runs_the_runners_in_a_fresh_order_so_none_keeps_one_neighbour() -> None:
    from autopart.tuning.verify import round_order

    names = ["onnxruntime alone", "openvino alone", "single:a", "single:b", "ilp"]
    orders = [round_order(names, index) for index in range(20)]
    assert all(sorted(order) == sorted(names) for order in orders)
    assert round_order(names, 3) == orders[3]  # seeded: a rerun repeats it
    predecessors: dict[str, set[str]] = {name: set() for name in names}
    for order in orders:
        for before, after in itertools.pairwise(order):
            predecessors[after].add(before)
    assert all(len(seen) >= 3 for seen in predecessors.values()), predecessors


def test_the_runner_after_one_that_lingers_starts_only_once_its_cores_are_quiet() -> None:
    """A timed runner never follows a spinning one at once; a run only judged waits for
    nothing (no timing follows it that the spinning could slow)."""
    import time

    from autopart import api
    from autopart.ir.feeds import random_inputs
    from autopart.runtime.executor import Executor
    from autopart.tuning.verify import measure_plans

    _, graph = api.make_plan(tiny_cnn(), fallback="cpu@numpy")
    feeds = random_inputs(graph, 0)
    outputs = Executor(graph).run(feeds).outputs
    calls: list[tuple[str, float, float]] = []

    def peer(name: str):  # type: ignore[no-untyped-def]
        def run(_feeds: object) -> dict:
            start = time.perf_counter()
            calls.append((name, start, time.perf_counter()))
            return outputs

        return run

    names = ("spins", "b", "c")
    runners = {name: peer(name) for name in names}  # measure_plans takes them from the dict
    measure_plans(
        graph, {}, feeds, rounds=4, min_timed_s=0.0, peers=runners,
        peer_linger_s={"spins": 0.03},
    )  # fmt: skip
    judged, rounds = calls[: len(names)], calls[len(names) :]  # each judged once first
    assert sorted(name for name, _, _ in judged) == sorted(names)
    assert all(after[1] - before[2] < 0.03 for before, after in itertools.pairwise(judged))
    gaps = [
        after[1] - before[2]
        for before, after in itertools.pairwise(rounds)
        if before[0] == "spins" and after[0] != "spins"
    ]
    assert gaps and min(gaps) >= 0.03
    others = [
        after[1] - before[2] for before, after in itertools.pairwise(rounds) if before[0] == "b"
    ]
    assert max(others) < 0.03  # runners that do not linger are not waited for


def test_only_a_lone_onnxruntime_partition_lingers(tiny_path: Path) -> None:  # noqa: F811
    from autopart.ir.target import VirtualDevice
    from autopart.plan.build import build_plan_for
    from autopart.runtime.plan_executor import PlanExecutor
    from autopart.targets.onnxruntime.settings import ONNXRUNTIME

    graph = autopart.load(str(tiny_path))
    ort, numpy_ = VirtualDevice.parse("cpu@onnxruntime"), VirtualDevice.parse("cpu@numpy")
    names = [node.name for node in graph.nodes]
    lone = build_plan_for(graph, dict.fromkeys(names, ort), numpy_, "lone")
    split = build_plan_for(graph, {n: numpy_ if n == names[0] else ort for n in names}, numpy_, "s")
    with PlanExecutor(lone, graph) as executor:
        assert executor.linger_s == ONNXRUNTIME.spin_linger_s > 0
    with PlanExecutor(split, graph) as executor:
        assert executor.linger_s == 0.0


def test_a_runner_that_fails_is_dropped_with_its_reason_and_the_others_are_timed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autopart import api
    from autopart.errors import ExecutionError, ResourceError
    from autopart.ir.feeds import random_inputs
    from autopart.runtime.executor import Executor
    from autopart.tuning import verify

    plan, graph = api.make_plan(tiny_cnn(), fallback="cpu@numpy")
    feeds = random_inputs(graph, 0)
    outputs = Executor(graph).run(feeds).outputs
    calls = {"flaky": 0}

    def flaky(_feeds: object) -> dict:
        calls["flaky"] += 1
        if calls["flaky"] > 2:
            raise ExecutionError("openvino failed computing y: Unsupported data type: int64")
        return outputs

    real = verify.PlanExecutor

    def compile_or_run_out_of_memory(plan_: Plan, graph_: object) -> object:
        if plan_ is hungry:
            raise ResourceError("running 'g' needs 9 GiB, more than the 1 GiB available")
        return real(plan_, graph_)

    hungry = Plan.from_dict(plan.to_dict())
    monkeypatch.setattr(verify, "PlanExecutor", compile_or_run_out_of_memory)
    failures: dict[str, str] = {}
    measured = verify.measure_plans(
        graph, {"numpy": plan, "hungry": hungry}, feeds, rounds=3, min_timed_s=0.0,
        peers={"flaky": flaky, "steady": lambda _feeds: outputs}, failures=failures,
    )  # fmt: skip
    assert set(measured) == {"numpy", "steady"}
    assert failures == {
        "hungry": "running 'g' needs 9 GiB, more than the 1 GiB available",
        "flaky": "openvino failed computing y: Unsupported data type: int64",
    }
    assert len(measured["numpy"].round_medians) == len(measured["steady"].round_medians) == 3


def test_the_stage_log_beats_while_a_stage_hears_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A stage spent in one long call (a whole model compiling) is never silent in a log."""
    import time

    from autopart.cli.common import StageLog

    with StageLog() as log:
        log.heartbeat_s = 0.5
        task = log.add_task("x", stage="screen")
        log.update(task, completed=0, total=0, description="compiling openvino alone")
        time.sleep(2.8)  # no update
    lines = capsys.readouterr().err.splitlines()
    beats = [line for line in lines if "s so far: compiling openvino alone" in line]
    assert len(beats) >= 2, lines
    assert re.match(r"screen: 0 steps in [\d.]+ s", lines[-1])
