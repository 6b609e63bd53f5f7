"""The compiled OpenCL subgraph: steps of kernel launches, run on one in-order queue.

Every step reads named device arrays and produces named device arrays. A step's kernels
are bound once at compile time (constant buffers and scalars set up front); only the
buffers that change from run to run are set per launch. Intermediates come from the memory
pool reserved for the queue, so a buffer freed after its last use is safely reused by a
later launch on the same in-order queue. Values that leave the subgraph come from the
device's shared pool, like copies onto the device: their buffers are reused once released,
so they must be released only after every kernel reading them has finished, as the plan
executor does. A fresh buffer per output and run cost more in page faults than many a
kernel (a squeezenet Conv timed alone: 3.1 ms fresh against 1.2 ms pooled).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autopart.errors import TargetError
from autopart.targets.codegen import CompiledSubgraph, Environment
from autopart.targets.opencl.device import OpenCLDevice, cl, cla


@dataclass(frozen=True)
class Slot:
    """A kernel argument filled per run: input, output or scratch array ``index`` of a step."""

    kind: str  # "in" | "out" | "tmp"
    index: int


class _Slots:
    """``IN[i]``, ``OUT[i]``, ``TMP[i]``: the slot of a step's i-th input, output, scratch."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __getitem__(self, index: int) -> Slot:
        return Slot(self.kind, index)


IN, OUT, TMP = _Slots("in"), _Slots("out"), _Slots("tmp")


class Launch:
    """One kernel enqueue with its sizes; fixed arguments are set once, slots per run."""

    __slots__ = ("fixed", "global_size", "kernel", "local_size", "slots")

    def __init__(
        self,
        kernel: Any,
        global_size: Sequence[int],
        local_size: Sequence[int] | None,
        args: Sequence[Any],
    ) -> None:
        self.kernel = kernel
        self.global_size = tuple(int(size) for size in global_size)
        self.local_size = None if local_size is None else tuple(int(s) for s in local_size)
        self.slots: list[tuple[int, Slot]] = []
        self.fixed = [arg for arg in args if not isinstance(arg, Slot)]  # keeps buffers alive
        for index, arg in enumerate(args):
            if isinstance(arg, Slot):
                self.slots.append((index, arg))
            else:
                kernel.set_arg(index, getattr(arg, "base_data", arg))

    def enqueue(self, queue: Any, arrays: dict[str, list[Any]]) -> Any:
        """Bind this run's buffers and enqueue; returns the kernel's event."""
        for index, slot in self.slots:
            self.kernel.set_arg(index, arrays[slot.kind][slot.index].base_data)
        return cl.enqueue_nd_range_kernel(queue, self.kernel, self.global_size, self.local_size)


@dataclass
class Step:
    """Launches that read ``inputs`` and write fresh arrays for ``outputs``.

    ``out_shapes`` and ``tmp_shapes`` size the output and scratch arrays; ``escapes[i]``
    says output ``i`` leaves the subgraph (it must not come from the queue's pool, which
    only that queue's order protects).
    ``view`` makes the step allocate nothing and return ``view(inputs)`` instead.
    """

    name: str
    inputs: list[str]
    outputs: list[str]
    out_shapes: list[tuple[int, ...]] = field(default_factory=list)
    tmp_shapes: list[tuple[int, ...]] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    view: Callable[[list[Any]], list[Any]] | None = None
    escapes: list[bool] = field(default_factory=list)
    free: list[str] = field(default_factory=list)

    def run(
        self, queue: Any, pool: Any, shared: Any, inputs: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        """Allocate, launch; returns the output arrays and the events of the launches.

        Intermediates come from the queue's ``pool``, outputs that escape from the device's
        ``shared`` pool (see :meth:`OpenCLDevice.shared_pool`).
        """
        if self.view is not None:
            return self.view(inputs), []
        outs = [
            cla.empty(queue, shape, np.float32, allocator=shared if escapes else pool)
            for shape, escapes in zip(self.out_shapes, self.escapes, strict=True)
        ]
        tmps = [cla.empty(queue, shape, np.float32, allocator=pool) for shape in self.tmp_shapes]
        arrays = {"in": inputs, "out": outs, "tmp": tmps}
        events = [launch.enqueue(queue, arrays) for launch in self.launches]
        return outs, events


def _contiguous(queue: Any, name: str, array: Any) -> Any:
    """``array`` itself when it starts its buffer and is C-contiguous, else a packed copy."""
    if not array.flags.c_contiguous:
        raise TargetError(f"opencl input {name!r} is not C-contiguous")
    if array.offset == 0:
        return array
    copy = cla.empty(queue, array.shape, array.dtype)
    cl.enqueue_copy(
        queue, copy.base_data, array.base_data, src_offset=array.offset, byte_count=array.nbytes
    )
    return copy


class OpenCLSubgraph(CompiledSubgraph):
    """Steps run in order on one queue; intermediates are released after their last use.

    ``reads`` names the inputs read from the environment, with their expected shapes (graph
    constants are resident in ``constants`` or folded into kernel arguments instead).

    ``run`` only enqueues: it returns once the work is queued, with every output's array
    carrying the event that completes it (``device.to_host`` and later subgraphs wait for
    it). Inputs produced on another queue are waited for before the first launch.
    """

    def __init__(
        self,
        device: OpenCLDevice,
        unit: int | None,
        steps: list[Step],
        constants: dict[str, Any],
        inputs: Sequence[str],
        outputs: Sequence[str],
        reads: dict[str, tuple[int, ...]],
    ) -> None:
        self.device = device
        self.unit = unit
        self.queue = device.queue(unit)
        self.pool = device.pool(unit)
        self.shared = device.shared_pool()
        self.steps = steps
        self.constants = constants
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.reads = reads

    def run(self, env: Environment) -> None:
        """Enqueue the subgraph: read ``inputs`` from ``env``, store ``outputs`` there."""
        self._run(env)

    def run_timed(self, env: Environment) -> float:
        """Run, wait, and return the device time in seconds from profiling events.

        The time spans the start of the first kernel to the end of the last one; a subgraph
        made only of views launches nothing and takes 0.0 s.
        """
        first, last = self._run(env)
        if first is None or last is None:
            return 0.0
        last.wait()
        return max((last.profile.end - first.profile.start) * 1e-9, 0.0)

    def _input(self, env: Environment, name: str, shape: tuple[int, ...]) -> Any:
        try:
            array = env[name]
        except KeyError:
            raise TargetError(f"opencl subgraph input {name!r} is missing") from None
        if not isinstance(array, cla.Array):
            raise TargetError(
                f"opencl subgraph input {name!r} is a {type(array).__name__}, not an array "
                f"on {self.device.name}; copy it there with device.from_host"
            )
        if array.context != self.queue.context:
            raise TargetError(f"opencl subgraph input {name!r} lives on another device")
        if array.dtype != np.float32 or array.shape != shape:
            raise TargetError(
                f"opencl subgraph input {name!r} is {array.dtype}{list(array.shape)}, "
                f"expected float32{list(shape)}"
            )
        return array

    def _run(self, env: Environment) -> tuple[Any, Any]:
        queue = self.queue
        local: dict[str, Any] = dict(self.constants)
        waits: list[Any] = []
        arrays = {name: self._input(env, name, shape) for name, shape in self.reads.items()}
        for array in arrays.values():
            waits.extend(array.events)
        if waits:  # inputs produced through other queues
            cl.enqueue_barrier(queue, wait_for=waits)
        for name, array in arrays.items():
            local[name] = _contiguous(queue, name, array)
        first = last = None
        for step in self.steps:
            inputs = [local[name] for name in step.inputs]
            outs, events = step.run(queue, self.pool, self.shared, inputs)
            for name, array in zip(step.outputs, outs, strict=True):
                local[name] = array
            if events:
                first = first or events[0]
                last = events[-1]
            for name in step.free:
                del local[name]
        for name in self.outputs:
            array = local[name]
            if last is not None:
                array.add_event(last)
            env[name] = array
        return first, last
