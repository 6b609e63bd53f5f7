"""The profiler's reference values: every value the reference computes, within a memory bound."""

from __future__ import annotations

import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autopart import api
from autopart.errors import ResourceError
from autopart.ir.feeds import random_inputs
from autopart.profile import values as values_module
from autopart.profile.values import HeldValues, reference_values
from autopart.runtime.executor import Executor
from autopart.testing.scale_models import op_chain, transformer_stack
from tests.test_live_memory import relu_chain
from tests.test_profile import tiny_cnn

MIB = 1 << 20


def every_value(graph: Any) -> dict[str, Any]:
    """Every value the reference computes, all held at once (as the profiler once did)."""
    produced = [name for node in graph.nodes for name in node.outputs if name]
    compiled = Executor(graph).codegen.compile(graph, graph.nodes, graph.inputs, produced)
    env: dict[str, Any] = dict(random_inputs(graph, seed=0))
    compiled.run(env)
    return env


@pytest.mark.parametrize("in_memory", [0, 64 << 10, 1 << 40])
@pytest.mark.parametrize(
    "model", [tiny_cnn, lambda: op_chain(120), lambda: transformer_stack(150)],
    ids=["tiny_cnn", "op_chain", "transformer_stack"],
)  # fmt: skip
def test_the_values_are_the_references_wherever_they_are_held(model: Any, in_memory: int) -> None:
    graph = api.load(model())
    held, full = reference_values(graph, in_memory), every_value(graph)
    read = [n for node in graph.nodes for n in node.inputs if n and graph.value(n).const is None]
    assert set(read) <= set(held)  # every value an op reads, so every op can be timed
    for name in held:
        np.testing.assert_array_equal(held[name], full[name], err_msg=name)
    assert held.held_bytes <= in_memory
    assert (held.spilled_bytes > 0) == (in_memory < sum(full[n].nbytes for n in held))
    held.close()


def test_values_past_the_bound_wait_on_disk_and_leave_with_it() -> None:
    graph = api.load(relu_chain(200))  # 200 values of 1 MiB
    tracemalloc.start()
    held = reference_values(graph, in_memory=16 * MIB)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 40 * MIB  # every value in memory would be 200 MiB
    assert held.held_bytes <= 16 * MIB and held.spilled_bytes >= 184 * MIB
    folder = held._folder
    assert folder is not None and len(list(folder.iterdir())) == len(held) - len(held._memory)
    np.testing.assert_array_equal(held["v150"], np.maximum(held["x"], 0))  # read from disk
    held.close()
    assert not folder.exists()


def test_a_spilled_value_that_comes_back_otherwise_is_refused_in_one_line() -> None:
    held = HeldValues(in_memory=0)
    held.keep("x", np.ones((4, 4), np.float32))
    path = next(Path(held._folder or "").iterdir())
    np.save(path, np.ones((2, 8), np.float32))
    with pytest.raises(ResourceError) as refused:
        held["x"]
    assert "came back" in str(refused.value) and "\n" not in str(refused.value)
    held.close()


def test_a_spill_the_disk_cannot_take_is_one_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(values_module, "VALUES", replace(values_module.VALUES, disk_margin=1 << 62))
    held = HeldValues(in_memory=0)
    with pytest.raises(ResourceError) as refused:
        held.keep("x", np.ones(8, np.float32))
    assert "set TMPDIR" in str(refused.value) and "\n" not in str(refused.value)
    held.close()


def test_values_that_are_not_arrays_stay_in_memory() -> None:
    held = HeldValues(in_memory=0)
    held.keep("sequence", [np.ones(3)])
    held.keep("absent", None)
    held.keep("x", np.zeros(3))
    held.keep("x", np.ones(2))  # replaced, the old file gone
    assert held["sequence"][0].shape == (3,) and held["absent"] is None
    np.testing.assert_array_equal(held["x"], np.ones(2))
    assert len(held) == 3 and held.spilled_bytes == 16
    assert len(list((held._folder or Path()).iterdir())) == 1
    held.close()
