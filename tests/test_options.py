"""One options object from the command line to the search (`TuneOptions.search`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import optuna
import pytest

import autopart
from autopart import api
from autopart.errors import AutopartError
from autopart.plan.schema import Plan
from autopart.search.constraints import Constraints
from autopart.search.options import Method, Objective, SearchOptions
from autopart.tuning.options import SEARCH_FIELDS, SET_BY_TUNE, TuneOptions
from tests.test_errors import assert_one_line_error, invoke
from tests.test_profile import FAST, tiny_cnn, tiny_path  # noqa: F401 - fixture

TARGETS = ["cpu@onnxruntime", "cpu@numpy"]


def test_the_search_options_are_stated_once() -> None:
    tune_fields = {f.name for f in dataclasses.fields(TuneOptions)}
    search_fields = {f.name for f in dataclasses.fields(SearchOptions)}
    assert not tune_fields & search_fields  # no field in both
    assert set(SEARCH_FIELDS) | SET_BY_TUNE == search_fields
    built = TuneOptions.build(objective="makespan", seed=3, rounds=2, precision="f32,bf16")
    assert built.rounds == 2 and built.search.seed == 3
    assert built.search.objective is Objective.MAKESPAN
    assert built.search.precision == ("f32", "bf16") == built.accuracy_policy.precisions
    again = built.updated(search=SearchOptions(method="ilp"), budget_s=4.0)
    assert again.search == SearchOptions(method=Method.ILP, budget_s=4.0)  # search replaced
    with pytest.raises(TypeError):
        TuneOptions.build(budget=1.0)  # the field is budget_s
    with pytest.raises(TypeError):
        TuneOptions.build(study_name="mine")  # the tune names its study


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"objective": "fastest"},
            "unknown objective 'fastest': use latency, makespan, pareto or throughput",
        ),
        ({"method": "exhaustive"}, "unknown search 'exhaustive': use ilp, optuna or auto"),
        ({"budget_s": -5.0}, "--budget must be a finite number of seconds, more than 0, not -5"),
        ({"budget_s": float("nan")}, "--budget must be a finite number of seconds"),
        ({"seed": -1}, "--seed must be an integer from 0 to 4294967295, not -1"),
        ({"seed": 2**32}, "--seed must be an integer from 0 to 4294967295"),
        ({"seed": True}, "--seed must be an integer"),
        ({"tolerance": 0.0}, "--tolerance must be a finite relative error above 0"),
        ({"precision": "fp16"}, "unknown precision 'fp16'"),
        ({"rounds": 0}, "--rounds must be an integer at least 1, not 0"),
    ],
)
def test_bad_values_raise_the_same_one_line_error_wherever_they_are_given(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(AutopartError) as built:
        TuneOptions.build(**fields)
    assert str(built.value).startswith(message)
    with pytest.raises(AutopartError) as tuned:
        autopart.tune("squeezenet", **fields)  # refused before the model loads
    assert str(tuned.value) == str(built.value)
    search = {k: v for k, v in fields.items() if k in SEARCH_FIELDS}
    if search:
        with pytest.raises(AutopartError) as direct:
            SearchOptions(**search)
        assert str(direct.value) == str(built.value)


def test_every_search_option_of_a_tune_reaches_the_search(
    tmp_path: Path,
    tiny_path: Path,  # noqa: F811
) -> None:
    """A real tune: the options the planner ran with (``outcome.options``) are those asked."""
    profiles = tmp_path / "profiles"
    api.profile(str(tiny_path), TARGETS, profiles, settings=FAST)
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    asked: dict[str, Any] = {
        "constraints": Constraints.from_cli(
            ("name:relu1=cpu@numpy",), ("name:conv2=cpu@numpy",), (), None
        ),
        "objective": Objective.MAKESPAN,
        "method": Method.OPTUNA,
        "budget_s": 1.5,
        "seed": 7,
        "storage": storage,
        "precision": ("f32",),
        "tolerance": 0.005,
    }
    assert set(asked) == set(SEARCH_FIELDS)  # a new search option must be asked here too
    defaults = SearchOptions()
    assert all(value != getattr(defaults, name) for name, value in asked.items())
    report = autopart.tune(
        str(tiny_path), targets=TARGETS, profiles_dir=profiles,
        search_dir=tmp_path / "search", rounds=1, peers=False, **asked,
    )  # fmt: skip
    received = report.outcome.options
    assert {name: getattr(received, name) for name in SEARCH_FIELDS} == asked
    assert received.source == str(tiny_path) and received.accuracy is None  # f32 only
    assert received.study_name is not None and received.study_name.startswith("makespan-")
    # and the search acted on them
    assert report.outcome.method == "ilp+optuna" and report.outcome.optuna is not None
    study = optuna.load_study(study_name=received.study_name, storage=storage)
    assert len(study.trials) == report.outcome.optuna.trials > 0
    for candidate in report.outcome.candidates.values():
        assert str(candidate.assignment["relu1"]) == "cpu@numpy"
        assert str(candidate.assignment["conv2"]) != "cpu@numpy"
    assert report.plan.measured is not None and report.plan.measured.tolerance == 0.005


def test_the_command_line_builds_the_search_options_it_is_given(
    tmp_path: Path,
    tiny_path: Path,  # noqa: F811
) -> None:
    profiles = tmp_path / "profiles"
    api.profile(str(tiny_path), TARGETS, profiles, settings=FAST)
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    out = tmp_path / "plan.json"
    code, output = invoke(
        "tune", str(tiny_path), "--targets", ",".join(TARGETS), "--profiles", str(profiles),
        "--search-dir", str(tmp_path / "search"), "--rounds", "1", "--no-peers", "-o", str(out),
        "--objective", "makespan", "--search", "optuna", "--budget", "1.5", "--seed", "7",
        "--storage", storage, "--pin", "name:relu1=cpu@numpy", "--forbid", "name:conv2=cpu@numpy",
        "--precision", "f32", "--tolerance", "0.005",
    )  # fmt: skip
    assert code == 0, output
    plan = Plan.load(out)
    assert plan.predicted is not None and plan.predicted.objective == "makespan"
    assert plan.assignment["relu1"] == "cpu@numpy" and plan.assignment["conv2"] != "cpu@numpy"
    assert plan.measured is not None and plan.measured.tolerance == 0.005
    (summary,) = optuna.get_all_study_summaries(storage)
    assert summary.study_name.startswith("makespan-") and summary.n_trials > 0
    code, output = invoke("tune", str(tiny_path), "--seed", "-1")
    assert_one_line_error(code, output, "--seed must be an integer from 0 to 4294967295")


def test_the_search_keeps_to_the_precisions_it_is_given() -> None:
    from autopart.costmodel.costs import Costs
    from autopart.ir.target import VirtualDevice
    from autopart.search.constraints import ConstraintError
    from autopart.search.planner import search

    graph = autopart.load(tiny_cnn())
    f32, bf16 = VirtualDevice.parse("cpu@numpy"), VirtualDevice.parse("cpu@numpy:bf16")
    node_cost = {node.name: {f32: 2e-6, bf16: 1e-6} for node in graph.nodes}
    costs = Costs(graph, [f32, bf16], node_cost)
    free = search(costs, SearchOptions(method="ilp"))
    assert {str(t) for t in free.chosen.assignment.values()} == {"cpu@numpy:bf16"}
    exact = search(costs, SearchOptions(method="ilp", precision="f32"))
    assert {str(t) for t in exact.chosen.assignment.values()} == {"cpu@numpy"}
    assert all(
        set(map(str, c.assignment.values())) == {"cpu@numpy"} for c in exact.candidates.values()
    )
    only_bf16 = Costs(graph, [bf16], {name: {bf16: 1e-6} for name in node_cost})
    with pytest.raises(ConstraintError, match="no target computes in f32"):
        search(only_bf16, SearchOptions(precision="f32"))
