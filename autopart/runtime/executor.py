"""Single-target execution: compile a whole graph with one codegen and run it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from autopart.costmodel.measurements import Latencies
from autopart.host_memory import retain_freed_memory
from autopart.ir.feeds import check_run_fits, validate_feeds
from autopart.ir.graph import Graph
from autopart.targets.codegen import HOST
from autopart.targets.registry import get_codegen, reference_codegen


@dataclass
class RunResult(Latencies):
    """Outputs of the last run and the wall-clock latency of every run, in seconds."""

    outputs: dict[str, np.ndarray]


def collect_outputs(graph: Graph, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The graph's outputs from a host environment (outputs folded to constants included)."""
    return {
        name: env[name] if name in env else np.asarray(graph.value(name).const)
        for name in graph.outputs
    }


class Executor:
    """Runs every node of ``graph`` with one codegen (None: the reference, numpy)."""

    def __init__(self, graph: Graph, codegen: str | None = None) -> None:
        retain_freed_memory()  # runs reuse their buffers, as in a serving process
        check_run_fits(graph)
        self.graph = graph
        self.codegen = reference_codegen() if codegen is None else get_codegen(codegen)
        self.compiled = self.codegen.compile(
            graph, graph.nodes, graph.inputs, graph.outputs, replace(HOST, alone=True)
        )

    def run(self, feeds: Mapping[str, np.ndarray], repeat: int = 1, warmup: int = 0) -> RunResult:
        """Validate ``feeds``, run ``warmup`` untimed then ``repeat`` timed times."""
        checked = validate_feeds(self.graph, feeds)
        result = RunResult({})
        for index in range(warmup + max(repeat, 1)):
            env = dict(checked)
            start = time.perf_counter()
            self.compiled.run(env)
            elapsed = time.perf_counter() - start
            if index >= warmup:
                result.latencies.append(elapsed)
            result.outputs = collect_outputs(self.graph, env)
        return result
