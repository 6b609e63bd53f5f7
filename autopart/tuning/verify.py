"""Running candidate plans side by side on the real targets, with their outputs checked.

Plans are compiled once, then run in interleaved rounds (one run of each plan per round, in
an order that rotates from round to round), so that the machine's drift and each lane's
after-effects spread over every plan alike; medians are reported.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from autopart.api import check_outputs
from autopart.ir.graph import Graph
from autopart.plan.schema import Plan
from autopart.runtime.executor import Executor
from autopart.runtime.plan_executor import PlanExecutor, StepTiming

CHECK_TOLERANCE = 1e-3


@dataclass
class Measured:
    """Measured latencies of one plan, its last run's step timings and its output error."""

    latencies: list[float] = field(default_factory=list)
    steps: list[StepTiming] = field(default_factory=list)
    max_error: float = 0.0

    @property
    def median_s(self) -> float:
        """Median latency in seconds."""
        return statistics.median(self.latencies)

    @property
    def correct(self) -> bool:
        """Whether every output matched the numpy reference within the tolerance."""
        return self.max_error <= CHECK_TOLERANCE


MAX_ROUND_STRETCH = 20


def _stretched(rounds: int, round_s: float, min_timed_s: float) -> int:
    """How many timed rounds make ``min_timed_s`` seconds, never fewer than ``rounds``."""
    wanted = math.ceil(min_timed_s / max(round_s, 1e-9))
    return max(rounds, min(wanted, rounds * MAX_ROUND_STRETCH))


def measure_plans(
    graph: Graph,
    plans: Mapping[str, Plan],
    feeds: Mapping[str, np.ndarray],
    rounds: int = 10,
    warmup: int = 2,
    progress: Callable[[int, int, str], None] | None = None,
    peers: Mapping[str, Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]] | None = None,
    min_timed_s: float = 2.0,
) -> dict[str, Measured]:
    """Run every plan ``warmup`` + ``rounds`` times or more, interleaved; check outputs once.

    When the first timed round shows that ``rounds`` rounds would take less than
    ``min_timed_s`` seconds, rounds are added until they would (at most
    :data:`MAX_ROUND_STRETCH` times ``rounds``): a sub-millisecond model gets enough runs
    for its medians to mean something.

    ``peers`` are other runners (e.g. onnxruntime alone) timed by wall clock in the same
    rounds: each takes the feeds and returns the outputs by name.

    A KeyboardInterrupt stops early and returns what was measured (plans with no timed run
    are left out).
    """
    peers = dict(peers or {})
    results = {name: Measured() for name in [*plans, *peers]}
    reference = Executor(graph).run(feeds).outputs
    planned = warmup + rounds
    done = 0
    with contextlib.ExitStack() as stack:
        executors: dict[str, PlanExecutor] = {}
        try:
            for name, plan in plans.items():
                if progress is not None:
                    progress(done, len(plans) + len(results) * planned, f"compiling {name}")
                executors[name] = stack.enter_context(PlanExecutor(plan, graph))
                done += 1
            runners = [*executors, *peers]
            round_index, round_started = 0, time.perf_counter()
            while round_index < planned:
                # the order rotates, so that no runner always follows the same one (a lane's
                # lingering threads slow whatever runs next)
                shift = round_index % max(len(runners), 1)
                for name in runners[shift:] + runners[:shift]:
                    if progress is not None:
                        total = len(plans) + len(results) * planned
                        progress(done, total, f"running {name}")
                    if name in executors:
                        run = executors[name].run(feeds)
                        outputs, latencies = run.outputs, run.latencies
                        results[name].steps = run.steps
                    else:
                        start = time.perf_counter()
                        outputs = peers[name](feeds)
                        latencies = [time.perf_counter() - start]
                    done += 1
                    if round_index == 0:
                        errors = check_outputs(graph, feeds, outputs, reference)
                        results[name].max_error = max(errors.values(), default=0.0)
                    if round_index >= warmup:
                        results[name].latencies.extend(latencies)
                if round_index == warmup:
                    planned = warmup + _stretched(rounds, time.perf_counter() - round_started,
                                                  min_timed_s)  # fmt: skip
                round_index += 1
                round_started = time.perf_counter()
        except KeyboardInterrupt:
            pass
    return {name: result for name, result in results.items() if result.latencies}
