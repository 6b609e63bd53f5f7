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


def test_views_of_a_value_held_cost_nothing_more() -> None:
    held = HeldValues(in_memory=MIB + 1)
    x = np.ones((256, 1024), np.float32)
    held.keep("x", x)
    held.keep("r", x.reshape(1024, 256))
    held.keep("t", x.T[:10])
    assert held.held_bytes == MIB and held.spilled_bytes == 0
    held.keep("y", np.zeros(4, np.float32))  # a buffer of its own, past the bound
    assert held.spilled_bytes == 16
    held.keep("x", np.zeros(2, np.float32))  # the views still hold the first buffer
    assert held.held_bytes == MIB and held.spilled_bytes == 16 + 8
    for name in ("r", "t"):
        held.keep(name, None)  # the first buffer let go
    assert held.held_bytes == 0
    held.close()


def test_a_value_kept_again_leaves_every_other_value_as_written() -> None:
    held = HeldValues(in_memory=0)
    held.keep("a", np.full(3, 1.0))
    held.keep("b", np.full(3, 2.0))
    held.keep("a", np.full(3, 3.0))
    held.keep("c", np.full(3, 4.0))
    assert [float(held[name][0]) for name in ("a", "b", "c")] == [3.0, 2.0, 4.0]
    held.close()


@pytest.mark.parametrize(
    "view",
    [
        lambda x: x.T,
        lambda x: x[1:, ::2],
        lambda x: x[::-1, 3:],
        lambda x: x.reshape(-1)[5:17],
        lambda x: np.broadcast_to(x[0], (4, 8)),
        lambda x: x[:, 2],
    ],
    ids=["transpose", "strided", "reversed", "flat", "broadcast", "column"],
)
def test_a_spilled_view_writes_its_buffer_once_and_reads_back_equal(view: Any) -> None:
    held = HeldValues(in_memory=0)
    x = np.arange(48, dtype=np.float32).reshape(6, 8)
    held.keep("x", x)
    held.keep("v", view(x))
    assert held.spilled_bytes == x.nbytes  # the buffer, once
    np.testing.assert_array_equal(held["v"], view(x))
    np.testing.assert_array_equal(held["x"], x)
    held.keep("x", None)  # the buffer's file stays while a view reads it
    np.testing.assert_array_equal(held["v"], view(x))
    held.close()
