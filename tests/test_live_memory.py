"""The run guard weighs what a run holds at once, not every value's size added up."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from autopart import api
from autopart.errors import ResourceError
from autopart.ir.feeds import live_peak_bytes, random_inputs
from autopart.ir.graph import Graph
from autopart.limits import memory_limit
from autopart.runtime.executor import Executor
from autopart.testing.scale_models import op_chain, transformer_stack
from tests.test_memory_limit import resident
from tests.test_profile import tiny_cnn

MIB = 1 << 20


class Held(dict[str, Any]):
    """An environment that records the most bytes of arrays it held at once."""

    def __init__(self, feeds: dict[str, np.ndarray]) -> None:
        super().__init__(feeds)
        self.peak = self.total()

    def total(self) -> int:
        return sum(v.nbytes for v in self.values() if isinstance(v, np.ndarray))

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self.peak = max(self.peak, self.total())


def held_by_the_reference(graph: Graph) -> int:
    """The most bytes the numpy reference holds at once running ``graph``, weights included."""
    weights = sum(value.nbytes for value in graph.values.values() if value.is_const)
    env = Held(random_inputs(graph, 0))
    Executor(graph).compiled.run(env)
    return env.peak + weights


def relu_chain(length: int, rows: int = 256) -> onnx.ModelProto:
    """``length`` Relus in a row on a float32 [rows, 1024]: each value rows * 4 KiB."""
    names = ["x", *(f"v{i}" for i in range(length))]
    nodes = [helper.make_node("Relu", [a], [b]) for a, b in pairwise(names)]
    shape = [rows, 1024]
    graph = helper.make_graph(
        nodes,
        "relu_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "model",
    [tiny_cnn, lambda: op_chain(300), lambda: transformer_stack(300)],
    ids=["tiny_cnn", "op_chain", "transformer_stack"],
)
def test_the_bound_is_what_the_reference_holds(model: Any) -> None:
    graph = api.load(model())
    assert live_peak_bytes(graph) == held_by_the_reference(graph)


@settings(max_examples=8, deadline=None)
@given(st.integers(20, 400), st.integers(0, 3), st.booleans())
def test_the_bound_holds_on_generated_graphs(nodes: int, seed: int, stack: bool) -> None:
    graph = api.load(transformer_stack(nodes, seed) if stack else op_chain(nodes, seed))
    held = held_by_the_reference(graph)
    assert held == live_peak_bytes(graph)
    assert held <= sum(value.nbytes for value in graph.values.values())


def test_a_chain_whose_values_add_past_the_limit_runs_within_it() -> None:
    graph = api.load(relu_chain(200))  # 200 values of 1 MiB: the input and 2 alive at once
    assert sum(value.nbytes for value in graph.values.values()) >= 200 * MIB
    assert live_peak_bytes(graph) == 3 * MIB
    with memory_limit(resident() + 96 * MIB):
        executor = Executor(graph)
        out = executor.run({"x": np.ones((256, 1024), np.float32)}).outputs
    assert np.array_equal(next(iter(out.values())), np.ones((256, 1024), np.float32))


def test_a_run_that_cannot_hold_its_values_is_refused_in_one_line() -> None:
    graph = api.load(relu_chain(3, rows=64 * 1024))  # 256 MiB values
    with memory_limit(resident() + 96 * MIB), pytest.raises(ResourceError) as refused:
        Executor(graph)
    message = str(refused.value)
    assert "the values it holds at once" in message and "\n" not in message
