"""The screen's whole timings: a library too inexact brings its more exact plans forward.

Where OpenVINO as installed (bf16 on CPUs with bf16 units) changes more answers than the
budget allows, the same library in f32 is a user's next choice: the screen times it before
the budget runs out, whatever its place in the queue.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.loader import load_model
from autopart.tuning import whole_timing
from autopart.tuning.clock import Clock
from autopart.tuning.judge import Judge
from autopart.tuning.options import TuneOptions
from autopart.tuning.screen import screen_targets
from autopart.tuning.verify import Measured
from autopart.tuning.whole_timing import WholeJob, promote_exact, promote_promising, time_whole
from tests.test_profile import tiny_cnn
from tests.test_task_metrics import needs_bf16

TARGETS = [
    "cpu@numpy", "cpu@onnxruntime", "cpu@openvino", "cpu@openvino:bf16", "cpu@openvino:int8",
    "opencl:0@opencl", "cpu/0@openvino",
]  # fmt: skip


def plan_job(target: str, needed: bool = False) -> WholeJob:
    """A plan's job on ``target`` (nothing to compile: the tests time it by name)."""
    parsed = VirtualDevice.parse(target)
    return WholeJob(f"single:{target}", str(parsed.codegen), needed=needed, target=parsed)


@settings(max_examples=60, deadline=None)
@given(
    order=st.permutations(TARGETS),
    start=st.integers(0, len(TARGETS)),
    beyond=st.sampled_from(["cpu@openvino:int8", "cpu@openvino:bf16", "cpu@openvino"]),
)
def test_promotion_moves_only_the_more_exact_siblings_after_start(
    order: list[str], start: int, beyond: str
) -> None:
    """The jobs before ``start`` stay put; after it come the more exact siblings of the
    inexact plan (nearest precision first, each needed), then the rest in their order."""
    queue = [plan_job(target) for target in order]
    before = list(queue)
    promote_exact(queue, start, plan_job(beyond))
    exactness = ["cpu@openvino:int8", "cpu@openvino:bf16", "cpu@openvino"]
    wanted = exactness[exactness.index(beyond) + 1 :]
    siblings = [t for t in wanted if t in order[start:]]
    assert queue[:start] == before[:start]
    assert [job.name for job in queue[start : start + len(siblings)]] == [
        f"single:{t}" for t in siblings
    ]
    assert all(job.needed for job in queue[start : start + len(siblings)])
    rest = [job for job in before[start:] if job.name not in {f"single:{t}" for t in siblings}]
    assert queue[start + len(siblings) :] == rest
    assert sorted(job.name for job in queue) == sorted(job.name for job in before)


def test_promotion_from_int8_brings_bf16_then_f32() -> None:
    queue = [plan_job(t) for t in ["opencl:0@opencl", "cpu@openvino", "cpu@openvino:bf16"]]
    promote_exact(queue, 0, plan_job("cpu@openvino:int8"))
    assert [job.name for job in queue] == [
        "single:cpu@openvino:bf16", "single:cpu@openvino", "single:opencl:0@opencl"
    ]  # fmt: skip


def test_a_vgg16s_int8_plan_is_timed_before_libraries_not_yet_timed() -> None:
    """OpenVINO in bf16 timed at 15 ms and in f32 at 97 ms: its int8 plan promises 15 ms,
    its f32 plan 97; numpy and OpenCL, never timed yet, follow in their order."""
    queue = [plan_job(t) for t in ["cpu@numpy", "cpu@openvino", "opencl:0@opencl"]]
    queue.append(plan_job("cpu@openvino:int8"))
    promise = {("openvino", "bf16"): 0.015, ("openvino", "f32"): 0.097}
    promote_promising(queue, 0, promise)
    assert [job.name for job in queue] == [
        "single:cpu@openvino:int8", "single:cpu@openvino", "single:cpu@numpy",
        "single:opencl:0@opencl",
    ]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    order=st.permutations(TARGETS),
    start=st.integers(0, len(TARGETS)),
    needed=st.sets(st.sampled_from(TARGETS)),
    timed=st.dictionaries(
        st.tuples(
            st.sampled_from(["openvino", "onnxruntime", "numpy"]),
            st.sampled_from(["f32", "bf16", "int8"]),
        ),
        st.floats(1e-4, 1.0),
    ),
)
def test_promise_reorders_only_the_plans_not_needed_after_start(
    order: list[str], start: int, needed: set[str], timed: dict[tuple[str, str], float]
) -> None:
    """Jobs before ``start``, and needed ones, keep their places; the others are sorted by
    the quickest runner of their codegen at their precision or a more exact one, and
    those of no such runner keep their order after the rest."""
    queue = [plan_job(target, needed=target in needed) for target in order]
    before = list(queue)
    promote_promising(queue, start, timed)
    assert queue[:start] == before[:start]
    assert sorted(job.name for job in queue) == sorted(job.name for job in before)
    for index, job in enumerate(before):
        if job.needed:
            assert queue[index] == job

    def expected(job: WholeJob) -> float:
        assert job.target is not None
        exact = ["f32", "bf16", "int8"][: ["f32", "bf16", "int8"].index(job.target.computes_in) + 1]
        return min((timed.get((job.codegen, p), math.inf) for p in exact), default=math.inf)

    moved = [job for job in queue[start:] if not job.needed]
    assert [expected(job) for job in moved] == sorted(expected(job) for job in moved)
    unknown = [job.name for job in moved if expected(job) == math.inf]
    assert unknown == [j.name for j in before[start:] if not j.needed and expected(j) == math.inf]


def fake_timings(monkeypatch: pytest.MonkeyPatch, errors: Mapping[str, float]) -> list[str]:
    """``_time_job`` replaced: each job measured at 1 ms with its error from ``errors``.

    Returns the names of the jobs timed, in the order they were timed.
    """
    timed: list[str] = []

    def fake(
        model: object, graph: object, job: WholeJob, *rest: object
    ) -> tuple[dict[str, Measured], dict[str, object]]:
        timed.append(job.name)
        return {job.name: Measured(latencies=[1e-3], max_error=errors[job.name])}, {}

    monkeypatch.setattr(whole_timing, "_time_job", fake)
    return timed


@pytest.mark.parametrize("as_installed_error", [0.5, 0.001])
def test_a_spent_budget_still_times_the_library_more_exactly_where_it_was_too_inexact(
    monkeypatch: pytest.MonkeyPatch, as_installed_error: float
) -> None:
    """Past the screen's share only needed jobs run; a plan beyond the tolerance makes its
    library's f32 plan needed, ahead of the plans queued before it. Within it, nothing
    moves and the budget skips the rest."""
    jobs = [
        plan_job("cpu@openvino:bf16", needed=True),
        plan_job("cpu@onnxruntime", needed=True),
        plan_job("cpu@numpy"),
        plan_job("opencl:0@opencl"),
        plan_job("cpu@openvino"),
    ]
    errors = {job.name: 0.0 for job in jobs} | {"single:cpu@openvino:bf16": as_installed_error}
    timed = fake_timings(monkeypatch, errors)
    clock = Clock(1.0, started=time.perf_counter() - 10.0)  # spent
    graph = tiny_graph()
    found = time_whole(
        "tiny", graph, jobs, {}, {}, clock, None, Judge(graph), tolerance=lambda _: 0.01
    )
    promoted = ["single:cpu@openvino"] if as_installed_error > 0.01 else []
    assert timed == ["single:cpu@openvino:bf16", *promoted, "single:cpu@onnxruntime"]
    assert set(found.whole) == set(timed)
    assert clock.cut and "single:cpu@numpy" in clock.cut[0]


def tiny_graph() -> Graph:
    """The tiny CNN of the profile tests, as a graph."""
    return load_model(tiny_cnn())


@needs_bf16
def test_the_screen_times_openvino_in_f32_when_its_bf16_is_beyond_the_budget(
    tmp_path: Path,
) -> None:
    """A tolerance OpenVINO as installed (bf16) misses, and a spent budget: the screen
    still times OpenVINO in f32, which the tolerance admits, and makes it the incumbent
    over onnxruntime, rather than skipping it."""
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), path)
    graph = load_model(str(path))
    targets = ["cpu@numpy", "cpu@onnxruntime", "opencl:0@opencl", "cpu@openvino:bf16",
               "cpu@openvino"]  # fmt: skip
    options = TuneOptions.build(
        targets=targets, profiles_dir=tmp_path / "profiles", search_dir=tmp_path / "search",
        rounds=2, time_budget_s=0.01, tolerance=1e-4,
    )  # fmt: skip
    screening = screen_targets(str(path), graph, targets, options, Clock(0.01))
    whole = screening.whole
    assert whole["single:cpu@openvino:bf16"].max_error > 1e-4
    f32 = whole["single:cpu@openvino"]
    assert f32.max_error <= 1e-4 and np.isfinite(f32.median_s)
    assert "single:opencl:0@opencl" not in whole
