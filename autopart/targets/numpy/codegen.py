"""The ``numpy`` codegen: the reference kernels, run on the host, one call per node."""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterator, Sequence
from typing import Any

import numpy as np

from autopart.errors import ExecutionError, ModelError
from autopart.ir.control_flow import CONTROL_FLOW
from autopart.ir.graph import Graph, Node
from autopart.ir.observe import dynamic_values
from autopart.ops import KERNEL_ERRORS, bind, kernel_failure, refusal
from autopart.targets.codegen import (
    EXACT,
    HOST,
    Codegen,
    CompiledSubgraph,
    Environment,
    Placement,
    Reduction,
    Role,
)


class ShapeMismatchError(ModelError):
    """A control-flow node produced an output whose shape is not the one the graph fixed."""


# Ops whose result depends on the exact element type of an input.
_TYPE_EXACT = frozenset({"Cast", "CastLike"})


@functools.cache
def _is_narrow_float(dtype: Any) -> bool:
    """bfloat16 and the float8 types: numpy computes with them poorly, float32 exactly."""
    return dtype is not None and np.dtype(dtype).name.startswith(("bfloat16", "float8"))


def _widened(kernel: Any, out_dtypes: list[Any]) -> Any:
    """``kernel`` on narrow floats natively where numpy can, else in float32 rounded back.

    Native first, so that results round like onnx's reference, which computes in the type.
    """

    def call(*inputs: Any) -> tuple[np.ndarray, ...]:
        try:
            results = kernel(*inputs)
        except TypeError:
            results = None
        if results is not None and all(
            want is None or r.dtype == want for r, want in zip(results, out_dtypes, strict=False)
        ):
            return results
        wide = [
            x.astype(np.float32) if x is not None and _is_narrow_float(x.dtype) else x
            for x in inputs
        ]
        results = kernel(*wide)
        return tuple(
            r.astype(want) if want is not None and r.dtype != want else r
            for r, want in zip(results, [*out_dtypes, *[None] * len(results)], strict=False)
        )

    return call


def _shape_checked(kernel: Any, node: Node, graph: Graph) -> Any:
    """``kernel`` of a control-flow node, refusing outputs whose shape is not the static one.

    Their shapes may come from the model's declarations alone; a run that disagrees is an
    error rather than a tensor of another size flowing on. Values whose shapes depend on
    data (:mod:`autopart.ir.observe`) take whatever size comes.
    """
    dynamic = dynamic_values(graph)
    expected = [
        (name, graph.value(name).shape if name and name not in dynamic else None)
        for name in node.outputs
    ]

    def call(*inputs: Any) -> tuple[np.ndarray, ...]:
        results = kernel(*inputs)
        for (name, shape), result in zip(expected, results, strict=False):
            if shape is not None and tuple(result.shape) != tuple(shape):
                raise ShapeMismatchError(
                    f"{node.op_type} node {node.name!r} made {name!r} of shape "
                    f"{list(result.shape)}, but its static shape is {list(shape)}"
                )
        return results

    return call


class NumpyStep:
    """One node bound to its kernel, attributes and constants, and the values it frees after.

    ``args`` holds, per input slot, the constant array bound at compile time or ``None``
    where the value is read from the environment (or is absent: its name is ``""``).
    """

    __slots__ = ("args", "free", "inputs", "kernel", "name", "op_type", "outputs")

    def __init__(
        self,
        node: Node,
        kernel: Any,
        inputs: list[str],
        args: list[Any],
        outputs: list[str],
    ) -> None:
        self.name = node.name
        self.op_type = node.op_type
        self.kernel = kernel
        self.inputs = inputs
        self.args = args
        self.outputs = outputs
        self.free: list[str] = []


class NumpySubgraph(CompiledSubgraph):
    """Nodes run in order; intermediates are dropped right after their last use."""

    def __init__(
        self,
        steps: list[NumpyStep],
        inputs: Sequence[str],
        outputs: Sequence[str],
        passthrough: dict[str, np.ndarray] | None = None,
    ) -> None:
        self.steps = steps
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.passthrough = dict(passthrough or {})  # outputs that are graph constants

    def run(self, env: Environment) -> None:
        """Run every step, reading and writing ``env``.

        An error numpy raises computing a step (:data:`~autopart.ops.KERNEL_ERRORS`: operands
        of a type, shape or value it cannot compute with) becomes a one-line
        :class:`ExecutionError` naming the node, its op and the first line of numpy's message;
        the original stays chained as its cause. Other exceptions are bugs and pass through.
        """
        self.run_rounded(env, (), EXACT)
        env.update(self.passthrough)

    @property
    def node_names(self) -> list[str]:
        """The nodes in the order they run."""
        return [step.name for step in self.steps]

    def run_rounded(
        self,
        env: Environment,
        rounded: Collection[str],
        reduction: Reduction,
        start: int = 0,
        stop: int | None = None,
    ) -> None:
        """:meth:`run` from step ``start`` to ``stop``, ``rounded`` nodes emulating a precision.

        Those nodes compute on their inputs (weights included) as ``reduction`` maps them,
        and store their outputs as it maps them. Values are freed after their last reader,
        so ``env`` after a run to ``stop`` holds what a run from ``stop`` needs. Errors as
        :meth:`run`.
        """
        with np.errstate(all="ignore"):  # NaN and overflow are what ONNX computes, not news
            self._run_steps(env, rounded, reduction, self.steps[start:stop])

    @staticmethod
    def _run_steps(
        env: Environment, rounded: Collection[str], reduction: Reduction, steps: list[NumpyStep]
    ) -> None:
        for step in steps:
            args = _arguments(step, env)
            lowered = step.name in rounded
            results = _call(step, reduction.inputs(step.name, args) if lowered else args)
            if lowered:
                results = reduction.outputs(step.name, list(results))
            for name, result in zip(step.outputs, results, strict=False):
                if name:
                    env[name] = result
            for name in step.free:
                env.pop(name, None)

    def rounded_outputs(
        self, env: Environment, chosen: Collection[str], reduction: Reduction
    ) -> Iterator[tuple[str, Sequence[Any], Sequence[Any]]]:
        """Run every step once; for each node in ``chosen``, its exact outputs and rounded ones.

        The reduced outputs are what the node computes on its exact inputs mapped by
        ``reduction``, mapped in turn: its local error alone, one run for every node.
        """
        for step in self.steps:
            args = _arguments(step, env)
            results = _call(step, args)
            if step.name in chosen:
                lowered = _call(step, reduction.inputs(step.name, args))
                yield step.name, list(results), reduction.outputs(step.name, list(lowered))
            for name, result in zip(step.outputs, results, strict=False):
                if name:
                    env[name] = result
            for name in step.free:
                env.pop(name, None)


def _arguments(step: NumpyStep, env: Environment) -> list[Any]:
    """A step's arguments: its bound constants, else its inputs' values in ``env``."""
    return [
        bound if bound is not None or not name else env[name]
        for name, bound in zip(step.inputs, step.args, strict=True)
    ]


def _call(step: NumpyStep, args: list[Any]) -> Any:
    """The step's kernel on ``args``; numpy's errors become one-line ExecutionErrors."""
    try:
        return step.kernel(*args)
    except KERNEL_ERRORS as error:
        raise ExecutionError(
            f"node {step.name!r} ({step.op_type}) failed on numpy: {kernel_failure(error)}"
        ) from error


class NumpyCodegen(Codegen):
    """Reference codegen on the host: every op that has a numpy kernel for its opset.

    It plays :attr:`~autopart.targets.codegen.Role.REFERENCE`: the default fallback, the
    executor's codegen and the last oracle of ``--check``.
    """

    name = "numpy"
    device_kind = "cpu"
    library = "numpy"
    roles = frozenset({Role.REFERENCE})

    def supports(self, node: Node, graph: Graph) -> bool:
        """Supported when a reference kernel implements the node's op, opset and attributes."""
        return self.reason(node, graph) is None

    def reason(self, node: Node, graph: Graph) -> str | None:
        """Why the reference kernels cannot run ``node`` (one line), or None when they can."""
        return refusal(
            node.op_type, node.domain, graph.opset_of(node), node.attrs, len(node.inputs)
        )

    def compile(
        self,
        graph: Graph,
        nodes: Sequence[Node],
        inputs: Sequence[str],
        outputs: Sequence[str],
        placement: Placement = HOST,
    ) -> NumpySubgraph:
        """Bind each node's kernel and attributes; precompute where buffers can be freed."""
        self.check_supported(graph, nodes)
        steps = []
        for node in nodes:
            opset = graph.opset_of(node)
            kernel = bind(
                node.op_type, node.domain, opset, node.attrs, len(node.outputs), node.captures
            )
            dtypes = [graph.value(name).dtype if name else None for name in node.outputs]
            if node.op_type not in _TYPE_EXACT and any(
                _is_narrow_float(graph.value(name).dtype)
                for name in [*node.present_inputs, *filter(None, node.outputs)]
            ):
                kernel = _widened(kernel, [d if _is_narrow_float(d) else None for d in dtypes])
            if node.op_type in CONTROL_FLOW:
                kernel = _shape_checked(kernel, node, graph)
            reads = [*node.inputs, *node.captures]
            bound = [graph.value(name).const if name else None for name in reads]
            steps.append(NumpyStep(node, kernel, reads, bound, list(node.outputs)))
        keep = set(outputs) | set(inputs)
        last: dict[str, int] = {}
        for index, step in enumerate(steps):
            for name in step.inputs:
                if name and not graph.value(name).is_const:
                    last[name] = index
            for name in step.outputs:
                if name:
                    last.setdefault(name, index)
        for name, index in last.items():
            if name not in keep:
                steps[index].free.append(name)
        produced = {name for node in nodes for name in node.outputs if name}
        passthrough = {
            name: const
            for name in outputs
            if name not in produced and (const := graph.value(name).const) is not None
        }
        return NumpySubgraph(steps, inputs, outputs, passthrough)
