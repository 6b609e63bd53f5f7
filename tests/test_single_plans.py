"""The screen's single-target plans: a target whose support probes is asked only when due.

Learnt late, a deferred target gets the assignment and plan it would have got learnt at
once; a budget spent before its turn never runs its probes; with time, its plan is timed
whole as any other's.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from autopart.loader import load_model
from autopart.search.constraints import Constraints
from autopart.targets.openvino import codegen as ovgen
from autopart.targets.openvino import quantize
from autopart.targets.openvino.peer import as_installed_precision
from autopart.testing.scale_models import transformer_stack
from autopart.tuning import single_plans
from autopart.tuning.clock import Clock
from autopart.tuning.options import TuneOptions
from autopart.tuning.screen import screen_targets
from autopart.tuning.single_plans import SinglePlans, support_probes
from autopart.tuning.whole_timing import whole_jobs
from autopart.tuning.workflow import tune_model
from tests.test_profile import tiny_cnn

INT8 = ovgen.OpenVinoCodegen.available() and "int8" in ovgen.OpenVinoCodegen.precisions()
pytestmark = pytest.mark.skipif(
    not INT8, reason="this CPU has no int8 units (AVX2, VNNI or AMX) OpenVINO lists as INT8"
)
TARGETS = [
    "cpu@numpy", "cpu@onnxruntime", "cpu@openvino", "cpu@openvino:int8", "cpu/0@openvino:int8",
]  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("single") / "tiny_cnn.onnx"
    onnx.save(tiny_cnn(), path)
    return path


def counted_probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The nodes whose int8 support is asked from now on, by name, as they are asked."""
    asked: list[str] = []
    real = quantize.runs_in_int8

    def counting(node: object, graph: object) -> bool:
        asked.append(getattr(node, "name", ""))
        return real(node, graph)  # type: ignore[arg-type]

    monkeypatch.setattr(quantize, "runs_in_int8", counting)
    return asked


def options(tmp_path: Path, **fields: object) -> TuneOptions:
    """A tune over :data:`TARGETS` in two rounds, saving under ``tmp_path``."""
    return TuneOptions.build(
        targets=TARGETS, profiles_dir=tmp_path / "profiles", search_dir=tmp_path / "search",
        rounds=2, **fields,
    )  # fmt: skip


def test_only_openvinos_int8_targets_probe_to_say_what_they_run() -> None:
    assert [t for t in TARGETS if support_probes(t)] == TARGETS[3:]


@pytest.mark.parametrize(
    ("model", "targets"), [("tiny", TARGETS), ("stack", TARGETS), ("tiny", TARGETS[3:])]
)
def test_a_target_learnt_late_gets_the_plan_it_would_have_got_at_once(
    model: str, targets: list[str], tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """And where only probing targets could be the fallback, none is deferred."""
    graph = load_model(str(tiny) if model == "tiny" else transformer_stack(40))
    late = SinglePlans(graph, targets, "m")
    if targets == TARGETS:
        assert late.deferred == TARGETS[3:] and len(late.assignments) == 3
    else:
        assert late.deferred == []
    for target in late.due_later():
        assert late.plan_of(target) is late.plan_of(target)  # built once
    monkeypatch.setattr(single_plans, "support_probes", lambda _: False)
    once = SinglePlans(graph, targets, "m")
    for plans in (late, once):  # every plan due, built
        for target in plans.due_now():
            plans.built(target)
    assert late.deferred == [] and once.deferred == []
    assert late.fallback == once.fallback
    assert late.assignments == once.assignments
    assert late.support.targets == once.support.targets
    assert {n: p.assignment for n, p in late.plans.items()} == {
        n: p.assignment for n, p in once.plans.items()
    }


def test_a_budget_spent_before_the_int8_plans_turn_runs_no_probe(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = counted_probes(monkeypatch)
    built = options(tmp_path, time_budget_s=0.01)
    graph = load_model(str(tiny))
    screening = screen_targets(str(tiny), graph, built.targets, built, Clock(0.01))
    assert asked == []
    assert "single:cpu@openvino:int8" not in screening.whole
    assert {"cpu@openvino:int8", "cpu/0@openvino:int8"} <= set(screening.unpriced)


def test_with_time_the_int8_plan_is_learnt_timed_whole_and_priced(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = counted_probes(monkeypatch)
    built = options(tmp_path, peers=False)
    graph = load_model(str(tiny))
    screening = screen_targets(str(tiny), graph, built.targets, built, Clock(None))
    assert asked
    assert "single:cpu@openvino:int8" in screening.whole
    assert "single:cpu@openvino:int8" in screening.plans
    assert screening.unpriced == []
    assert set(screening.could_save) == set(TARGETS)


@pytest.mark.slow  # the screen's own test above runs in the default tier
def test_a_tune_whose_budget_runs_out_first_runs_no_int8_probe(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the screen alone: no stage of a tune asks what int8 runs before it is due."""
    asked = counted_probes(monkeypatch)
    built = options(tmp_path, time_budget_s=0.01, constraints=Constraints.from_cli())
    report = tune_model(str(tiny), built)
    assert asked == []
    assert report.screening is not None and "cpu@openvino:int8" in report.screening.dropped


def test_only_the_libraries_as_installed_make_their_plans_needed(tiny: Path) -> None:
    """openvino alone f32 is a variant, not the bar: its plan waits its turn. Each library
    as installed comes right before its own plan, to share its compile or session."""
    offered = ovgen.OpenVinoCodegen.precisions()
    own = "cpu@openvino" + ("" if as_installed_precision() is None else ":bf16")
    targets = ["cpu@numpy", "cpu@onnxruntime", "cpu@openvino"]
    targets += ["cpu@openvino:bf16"] if "bf16" in offered else []
    jobs = whole_jobs(SinglePlans(load_model(str(tiny)), targets, "m"), with_peers=True)
    needed = {job.name for job in jobs if job.needed}
    assert needed == {
        "openvino alone", f"single:{own}", "onnxruntime alone", "single:cpu@onnxruntime"
    }  # fmt: skip
    assert [job.name for job in jobs][:4] == [
        "openvino alone", f"single:{own}", "onnxruntime alone", "single:cpu@onnxruntime"
    ]  # fmt: skip
