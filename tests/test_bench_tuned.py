"""A bench's tuned row is what a user's tune keeps: raced, saved, within its tolerance."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from autopart.plan.schema import Plan
from autopart.tuning.bench import bench_models
from autopart.tuning.options import BenchOptions
from tests.test_profile import tiny_cnn


@pytest.mark.slow
def test_a_bench_with_no_saved_plan_tunes_first_and_benches_the_plan_the_tune_kept(
    tmp_path: Path,
) -> None:
    model = tmp_path / "tiny_cnn.onnx"
    onnx.save(tiny_cnn(), model)
    options = BenchOptions.build(
        targets=["cpu@numpy", "cpu@onnxruntime"], rounds=2,
        profiles_dir=tmp_path / "profiles", search_dir=tmp_path / "search",
    )  # fmt: skip
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
