"""A bench's tuned row is what a user's tune keeps: raced, saved, within its tolerance."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import pytest

from autopart.plan.schema import Plan
from autopart.tuning.bench import bench_models
from autopart.tuning.options import BenchOptions
from tests.test_profile import tiny_cnn


def _tiny_bench(folder: Path, rounds: int) -> tuple[Path, BenchOptions]:
    """A small CNN saved in ``folder``, and a bench of it on two targets in ``rounds``."""
    model = folder / "tiny_cnn.onnx"
    onnx.save(tiny_cnn(), model)
    options = BenchOptions.build(
        targets=["cpu@numpy", "cpu@onnxruntime"], rounds=rounds,
        profiles_dir=folder / "profiles", search_dir=folder / "search",
    )  # fmt: skip
    return model, options


@pytest.mark.slow
def test_a_bench_with_no_saved_plan_tunes_first_and_benches_the_plan_the_tune_kept(
    tmp_path: Path,
) -> None:
    model, options = _tiny_bench(tmp_path, rounds=2)
    table = bench_models([str(model)], options)
    (saved,) = (tmp_path / "search").glob("*/plan.json")  # the tune saved it
    kept = Plan.load(saved)
    assert kept.measured is not None  # raced before it was saved
    chosen = table[table["kind"] == "chosen"].iloc[0]
    assert bool(chosen["within_budget"])
    assert chosen["partitions"] == len(kept.partitions)
    again = bench_models([str(model)], options)  # the saved plan is benched, not tuned again
    assert (
        saved.stat().st_mtime_ns
        == next((tmp_path / "search").glob("*/plan.json")).stat().st_mtime_ns
    )
    assert (again["kind"] == "chosen").sum() == 1


@pytest.mark.slow
def test_a_bench_lets_a_peer_measurably_behind_go_once_done_with_its_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bench races its plans in heats beside the peers; a peer measurably slower than
    the best one leaves once it has had the rounds asked, freeing what it compiled for the
    later heats (vgg19's bench held five peers, 2 GiB, to its last heat)."""
    from autopart import api
    from autopart.runtime.executor import Executor
    from autopart.tuning import bench
    from autopart.tuning.peers import peer_names
    from autopart.tuning.verify import Measured, measure_plans

    model, options = _tiny_bench(tmp_path, rounds=6)
    bench_models([str(model)], options)  # the tune, with the real peers, saves its plan
    executor = Executor(api.load(str(model)))

    def quick(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return executor.run(feeds).outputs

    def slow(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        time.sleep(0.02)
        return quick(feeds)

    fast_name, slow_name = peer_names()[:2]  # two peers' names, these runners behind them
    runners = {fast_name: quick, slow_name: slow}
    monkeypatch.setattr(bench, "peers", lambda *_, **__: (dict(runners), []))
    rounds: dict[str, int] = {}

    def measured(*args: object, **kwargs: object) -> dict[str, Measured]:
        result = measure_plans(*args, **kwargs)  # type: ignore[arg-type]
        rounds.update({name: len(m.round_medians) for name, m in result.items()})
        return result

    monkeypatch.setattr(bench, "measure_plans", measured)
    table = bench_models([str(model)], options).set_index("plan")
    assert 6 <= rounds[slow_name] < rounds[fast_name]  # its rounds, then it left
    assert table.loc[slow_name, "vs_best_peer_low"] > 1.0
    plans = table[(table["kind"] != "peer") & (table["error"] == "")]
    assert len(plans) > 2 and plans["vs_best_peer"].notna().all()  # each against the bar


@pytest.mark.slow  # a tune, then a bench of it: about 20 s
def test_a_bench_without_baselines_times_the_peers_and_the_tuned_plan_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``baselines=False`` never prepares the thorough search (every target profiled): the
    rows are the peers and the plan the tune saved, timed twice for the noise floor."""
    from autopart.tuning import bench

    model, options = _tiny_bench(tmp_path, rounds=2)

    def thorough(*_: object, **__: object) -> None:
        raise AssertionError("a bench without baselines prepared the thorough search")

    monkeypatch.setattr(bench, "prepare", thorough)
    table = bench_models([str(model)], options.updated(baselines=False))
    assert set(table["kind"]) <= {"peer", "chosen", "chosen-again"}
    assert {"chosen", "chosen-again"} <= set(table["kind"])
    assert (table["kind"] == "peer").any()
    (saved,) = (tmp_path / "search").glob("*/plan.json")
    chosen = table[table["kind"] == "chosen"].iloc[0]
    assert chosen["partitions"] == len(Plan.load(saved).partitions)
    assert np.isfinite(chosen["noise_floor"])
    assert np.isfinite(chosen["predicted_ms"])
    assert table["vs_best_single"].isna().all()


@pytest.mark.parametrize(("flag", "expected"), [(None, True), ("--no-baselines", False)])
def test_the_bench_command_hands_its_baselines_switch_to_the_bench(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str | None, expected: bool
) -> None:
    import pandas as pd
    from click.testing import CliRunner

    from autopart.cli import main

    seen: list[BenchOptions] = []

    def caught(models: object, options: BenchOptions, **_: object) -> pd.DataFrame:
        seen.append(options)
        return pd.DataFrame({"model": []})

    monkeypatch.setattr("autopart.tuning.bench.bench_models", caught)
    args = ["bench", "tiny.onnx", "--csv", str(tmp_path / "b.csv"), *([flag] if flag else [])]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (options,) = seen
    assert options.baselines is expected
