"""experiments/bench_table.py's verdicts on hand-made exp_heldout rows (nothing runs)."""

from __future__ import annotations

import math
from types import ModuleType

import pandas as pd
import pytest

from tests.experiment_import import import_experiment


@pytest.fixture(scope="module")
def table_module() -> ModuleType:
    """The script's module, imported as it would run (from ``experiments/``)."""
    return import_experiment("bench_table")


def _rows(
    model: str, tuned_ms: float, ov_ms: float, gap: float, spread: float, **tuned: float
) -> list[dict[str, object]]:
    """The rows of one model: three peers and the chosen plan, as exp_heldout writes them."""
    best = min(tuned_ms, ov_ms, 10.0)
    peers = [("onnxruntime alone", 10.0, 1e-6), ("openvino alone", ov_ms, 0.02)]
    peers.append(("openvino alone f32", 2 * ov_ms, 1e-6))
    rows = [
        {"model": model, "group": "heldout", "plan": name, "kind": "peer", "runs": 15,
         "median_ms": ms, "max_rel_error": error, "error": ""}
        for name, ms, error in peers
    ]  # fmt: skip
    peer_best = min(ms for _, ms, _ in peers)
    chosen = {
        "model": model, "group": "heldout", "plan": "tuned", "kind": "chosen", "runs": 15,
        "median_ms": tuned_ms, "predicted_ms": tuned_ms, "vs_best_peer": tuned_ms / peer_best,
        "vs_best_peer_low": 0.9, "vs_best_peer_high": 1.1, "noise_floor": gap,
        "noise_spread": spread, "vs_openvino": tuned_ms / ov_ms,
        "max_rel_error": tuned.get("error", 0.02), "tune_chosen": "ilp",
        "tune_precisions": "bf16", "tune_predicted_ms": tuned.get("predicted", best),
        "tune_measured_ms": tuned_ms, "error": "",
    }  # fmt: skip
    rows.append(chosen)
    return rows


def test_verdicts_hold_the_bar_to_the_gap_or_the_spread(table_module: ModuleType) -> None:
    rows = pd.DataFrame(
        _rows("quick", 4.0, 5.0, 0.01, 0.05, error=0.005)  # 0.8x OpenVINO, a quarter its error
        + _rows("noisy", 5.5, 5.0, 0.01, 0.2)  # 1.1x: beyond the gap, within the spread
        + _rows("slow", 6.0, 5.0, 0.01, 0.05, predicted=9.0)  # 1.2x: beyond both
    )
    table = table_module.verdicts(rows).set_index("model")
    assert table.loc["quick", ["met_gap", "met_spread", "goal_09"]].tolist() == [True] * 3
    assert table.loc["quick", "half_error"] and not table.loc["noisy", "half_error"]
    assert table.loc["noisy", ["met_gap", "met_spread"]].tolist() == [False, True]
    assert table.loc["slow", ["met_gap", "met_spread", "met_openvino"]].tolist() == [False] * 3
    assert math.isclose(table.loc["slow", "tune_prediction"], 1.5)
    summary = table_module.summary(table.reset_index())
    assert "bar met (gap): 1; (spread): 2" in summary
    assert "<= 0.9x openvino at no more error: 1 (quick)" in summary
    assert "within 20%: 2/3" in summary


def test_more_error_than_openvino_fails_the_goals(table_module: ModuleType) -> None:
    table = table_module.verdicts(pd.DataFrame(_rows("lossy", 4.0, 5.0, 0.01, 0.05, error=0.05)))
    assert table[["goal_09", "half_error", "met_openvino"]].iloc[0].tolist() == [False] * 3


def test_a_model_without_a_tuned_plan_shows_its_error(table_module: ModuleType) -> None:
    rows = pd.DataFrame(_rows("ok", 4.0, 5.0, 0.01, 0.05))
    failed = {"model": "broken", "group": "heldout", "plan": "tuned", "kind": "failed",
              "runs": 0, "error": "no plan could run"}  # fmt: skip
    table = table_module.verdicts(pd.concat([rows, pd.DataFrame([failed])], ignore_index=True))
    assert "error: no plan could run" in table_module.markdown(table)
    readme = table_module.readme(table)
    assert "| ok | heldout |" in readme and "broken" not in readme
