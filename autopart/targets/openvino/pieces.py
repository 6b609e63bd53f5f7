"""Large OpenVINO subgraphs compiled in pieces, run one after another.

OpenVINO's ``compile_model`` takes time growing faster than the graph: on this project's
machine a transformer stack of 1,000, 5,000 and 12,000 nodes compiled in 1.3, 12 and 40-60
s, and a chain of small ops (snippets off) of 5,000, 10,000 and 20,000 nodes in 3.8, 14
and 92 s. A subgraph of more than :data:`PIECE_NODES` nodes is therefore compiled as
consecutive pieces of the topological order, each cut where the fewest values cross, and
run piece after piece; values passing between pieces stay in the environment for the call
only. The plan does not see the difference. Each piece costs one ``infer`` call more:
about 40 us (a 3,000-node chain ran in 0.79 ms in pieces of 1,000, 0.69 ms whole).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from autopart.ir.graph import Graph, Node
from autopart.targets.codegen import CompiledSubgraph, Environment

PIECE_NODES = 2000  # a larger subgraph is compiled in pieces of at most this many nodes
Compile = Callable[[Sequence[Node], Sequence[str], Sequence[str]], CompiledSubgraph]


def cut_points(graph: Graph, nodes: Sequence[Node], outputs: Sequence[str]) -> list[int]:
    """Where the pieces of ``nodes`` end: each at most :data:`PIECE_NODES` long.

    Each cut is made, in the last quarter of its piece's room, where the fewest values
    made before it are read after it (or leave the subgraph).
    """
    position = {id(node): i for i, node in enumerate(nodes)}
    count = len(nodes)
    delta = [0] * (count + 1)  # values live across a cut before position k
    wanted = set(outputs)
    for i, node in enumerate(nodes):
        for name in node.outputs:
            if not name:
                continue
            readers = [position[id(c)] for c in graph.value(name).consumers if id(c) in position]
            last = count if name in wanted else max(readers, default=i)
            if last > i:
                delta[i + 1] += 1
                delta[last + 1 if last < count else count] -= 1
    live, running = [0] * (count + 1), 0
    for k in range(count + 1):
        running += delta[k]
        live[k] = running
    cuts, start = [], 0
    while count - start > PIECE_NODES:
        room = range(start + (3 * PIECE_NODES) // 4, start + PIECE_NODES + 1)
        end = min(room, key=lambda k: (live[k], -k))
        cuts.append(end)
        start = end
    return [*cuts, count]


def compile_in_pieces(
    graph: Graph,
    nodes: Sequence[Node],
    inputs: Sequence[str],
    outputs: Sequence[str],
    compile_piece: Compile,
) -> PiecewiseSubgraph:
    """``nodes`` compiled piece by piece with ``compile_piece(nodes, inputs, outputs)``."""
    ends = cut_points(graph, nodes, outputs)
    position = {id(node): i for i, node in enumerate(nodes)}
    wanted = set(outputs)
    pieces: list[CompiledSubgraph] = []
    passed: list[str] = []
    start = 0
    for end in ends:
        chunk = list(nodes[start:end])
        made = {name for node in chunk for name in node.outputs if name}
        read = dict.fromkeys(name for node in chunk for name in node.present_inputs)
        feeds = [n for n in read if n not in made and not graph.value(n).is_const]
        leaving = [
            name
            for name in dict.fromkeys(n for node in chunk for n in node.outputs if n)
            if name in wanted
            or any(position.get(id(c), -1) >= end for c in graph.value(name).consumers)
        ]
        pieces.append(compile_piece(chunk, feeds, leaving))
        passed += [name for name in leaving if name not in wanted]
        start = end
    constants = {name: graph.value(name).const for name in outputs}
    passthrough = {name: data for name, data in constants.items() if data is not None}
    return PiecewiseSubgraph(pieces, inputs, outputs, passed, passthrough)


class PiecewiseSubgraph(CompiledSubgraph):
    """Compiled pieces run in order, as one subgraph (see the module docstring).

    ``passed`` are the values pieces hand on to later ones, dropped from the environment
    after a run; ``passthrough`` the constant outputs no piece makes.
    """

    def __init__(
        self,
        pieces: list[CompiledSubgraph],
        inputs: Sequence[str],
        outputs: Sequence[str],
        passed: Sequence[str],
        passthrough: dict[str, np.ndarray],
    ) -> None:
        self.pieces = pieces
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.passed = list(passed)
        self._passthrough = passthrough
        self.config = dict(getattr(pieces[0], "config", {}))

    def run(self, env: Environment) -> None:
        """Run every piece in order; store the outputs, forget what passed between pieces."""
        self.run_timed(env)

    def run_timed(self, env: Environment) -> float:
        """Like :meth:`run`; returns the pieces' ``run_timed`` seconds summed."""
        elapsed = sum(piece.run_timed(env) for piece in self.pieces)
        self._finish(env)
        return elapsed

    def layout_samples(self, env: Environment, runs: int) -> list[tuple[float, float]]:
        """Per run, the pieces' layout and kernel seconds summed (each piece fed in turn)."""
        totals = [(0.0, 0.0)] * runs
        for piece in self.pieces:
            samples = piece.layout_samples(env, runs)
            piece.run(env)  # the next piece's inputs
            totals = [(a + c, b + d) for (a, b), (c, d) in zip(totals, samples, strict=True)]
        self._finish(env)
        return totals

    def _finish(self, env: Environment) -> None:
        for name in self.passed:
            env.pop(name, None)
        for name in self.outputs:
            if name not in env and name in self._passthrough:
                env[name] = self._passthrough[name]
