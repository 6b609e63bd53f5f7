"""How long a codegen would take to compile a whole large model, forecast from two prefixes.

Compile time is not linear in a model's size on every library: OpenVINO compiled run-order
prefixes of a 50,000-op elementwise chain in 0.86 s (500 nodes), 3.8 s (1,000), 22 s
(2,000) and 168 s (4,000), so the whole chain would take hours; a transformer stack's
500 to 8,000-node prefixes took 0.31 s to 12 s, about n^1.5. Under a budget the screen
compiles each codegen's first whole model within a deadline
(:mod:`~autopart.tuning.whole_timing`), and a compile that will never finish spends all
of it. So, first, the job compiles the first ``k`` and ``2k`` nodes of what it would
compile: a plan, of its largest partition on that codegen (a prefix of a topological
order of a convex set is convex); a peer, of the model's run order, as models of their
own built as the peer builds. A power law through the two times,
``t(n) = t(2k) * (n / 2k) ** b`` with ``b`` held within
[1, :attr:`~autopart.tuning.settings.ScreenSettings.forecast_max_exponent`], forecasts the
whole. A fixed cost per compile (OpenVINO's worker process, ~1 s) weighs more on the
smaller prefix, which lowers ``b``: the forecast errs quick, and a codegen is skipped only
when it is forecast beyond :attr:`~autopart.tuning.settings.ScreenSettings.forecast_margin`
times the deadline. The prefixes compile within the caller's deadline; a prefix that misses
it forecasts the whole as missing it too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autopart.host_memory import release_freed_memory
from autopart.ir.graph import Graph, Node
from autopart.ir.onnx_export import to_onnx
from autopart.plan.partition import boundary
from autopart.plan.schema import Plan
from autopart.targets.deadline import CompileTimeoutError, compiling_within
from autopart.targets.peer import Peer, PeerInputs
from autopart.targets.resolve import resolve
from autopart.tuning.settings import SCREEN


@dataclass(frozen=True)
class CompileForecast:
    """A codegen's forecast compile time for ``nodes`` nodes, from two timed prefixes.

    ``sizes`` and ``seconds`` are the prefixes' node counts and compile times
    (``math.inf``: the prefix missed the deadline); ``forecast_s`` the whole's forecast
    (``math.inf`` likewise); ``spent_s`` the wall time the prefixes took.
    """

    codegen: str
    nodes: int
    sizes: tuple[int, int]
    seconds: tuple[float, float]
    forecast_s: float
    spent_s: float

    def beyond(self, deadline_s: float) -> bool:
        """Whether the whole is forecast past ``deadline_s`` by more than the margin."""
        return self.forecast_s > SCREEN.forecast_margin * deadline_s

    def reason(self) -> str:
        """Why, in a phrase: the prefixes' times and the forecast."""
        timed = " and ".join(
            f"{size:,} nodes in {'over the deadline' if math.isinf(s) else f'{s:.2g} s'}"
            for size, s in zip(self.sizes, self.seconds, strict=True)
        )
        whole = "past the deadline" if math.isinf(self.forecast_s) else f"~{self.forecast_s:.3g} s"
        return f"it compiled {timed}, so all {self.nodes:,} forecast {whole}"


def forecast_plan(
    graph: Graph, plan: Plan, codegen: str, deadline_s: float
) -> CompileForecast | None:
    """The forecast for ``codegen`` compiling its largest partition of ``plan`` (see the module).

    None where that partition is under 4 prefixes of
    :attr:`~autopart.tuning.settings.ScreenSettings.forecast_nodes`, or a prefix fails to
    compile for a reason other than the deadline (the whole compile will then say why).
    """
    partitions = [p for p in plan.partitions if resolve(p.target).target.codegen == codegen]
    if not partitions:
        return None
    largest = max(partitions, key=lambda p: len(p.nodes))
    nodes = [graph.node(name) for name in largest.nodes]
    resolved = resolve(largest.target)

    def compile_prefix(prefix: Sequence[Node]) -> object:
        inputs, outputs = boundary(graph, prefix)
        return resolved.codegen.compile(graph, prefix, inputs, outputs, resolved.placement)

    return _forecast(codegen, nodes, compile_prefix, deadline_s)


def forecast_peer(graph: Graph, peer: Peer, deadline_s: float) -> CompileForecast | None:
    """The forecast for ``peer`` building its runner of the whole of ``graph``.

    Each prefix of ``graph``'s run order is exported as a model of its own, its inputs at
    their static shapes, and built as the peer builds the model (a library as installed
    compiles the whole model at once). None as :func:`forecast_plan`, and for a peer that
    runs a tool on the model first (it calibrates on the model's own inputs).
    """
    if peer.tool:
        return None

    def compile_prefix(prefix: Sequence[Node]) -> object:
        inputs, outputs = boundary(graph, prefix)
        shapes = {name: tuple(int(d) for d in graph.value(name).shape or ()) for name in inputs}
        return peer.build(to_onnx(graph, prefix, inputs, outputs), PeerInputs(shapes=shapes))

    return _forecast(peer.codegen, list(graph.nodes), compile_prefix, deadline_s)


def _forecast(
    codegen: str,
    nodes: Sequence[Node],
    compile_prefix: Callable[[Sequence[Node]], object],
    deadline_s: float,
) -> CompileForecast | None:
    """The forecast from ``compile_prefix`` timed on the two prefixes of ``nodes``."""
    small = SCREEN.forecast_nodes
    if len(nodes) < 4 * small:
        return None
    started = time.perf_counter()
    sizes = (small, 2 * small)
    seconds: list[float] = []
    for size in sizes:
        try:
            seconds.append(_compile_s(compile_prefix, nodes[:size], deadline_s))
        except CompileTimeoutError:
            break
        except Exception:  # a library's own error (no specific types): the whole says why
            return None
    spent = time.perf_counter() - started
    if len(seconds) < 2:
        timed = (seconds[0], math.inf) if seconds else (math.inf, math.inf)
        return CompileForecast(codegen, len(nodes), sizes, timed, math.inf, spent)
    whole = _power_law(sizes, (seconds[0], seconds[1]), len(nodes))
    return CompileForecast(codegen, len(nodes), sizes, (seconds[0], seconds[1]), whole, spent)


def _power_law(sizes: tuple[int, int], seconds: tuple[float, float], nodes: int) -> float:
    """``seconds[1] * (nodes / sizes[1]) ** b``, ``b`` through both points, held in range."""
    ratio = max(seconds[1], 1e-9) / max(seconds[0], 1e-9)
    exponent = math.log(ratio) / math.log(sizes[1] / sizes[0])
    exponent = min(max(exponent, 1.0), SCREEN.forecast_max_exponent)
    return seconds[1] * (nodes / sizes[1]) ** exponent


def _compile_s(
    compile_prefix: Callable[[Sequence[Node]], object], prefix: Sequence[Node], deadline_s: float
) -> float:
    """Seconds ``compile_prefix(prefix)`` takes within ``deadline_s``; what it made is freed."""
    started = time.perf_counter()
    with compiling_within(deadline_s):
        made = compile_prefix(prefix)
    elapsed = time.perf_counter() - started
    del made
    release_freed_memory()
    return elapsed
