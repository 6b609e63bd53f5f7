"""The numpy reference's values of a graph, as the profiler times ops on them.

Every op is timed on its real inputs, so the profiler keeps every value the reference
computes. Added up, those outgrow memory on models with large activations: a video
transformer's 1,643 values hold 10.9 GiB, though a run holds 0.5 GiB of them at once.
:func:`reference_values` therefore runs the reference step by step, holding only the
values still to be read (the reference, an :class:`~autopart.targets.codegen.Emulating`
subgraph, frees each after its last reader), and keeps what it computed in a
:class:`HeldValues`: in memory up to :attr:`ValuesSettings.in_memory`, in a temporary
folder beyond it, read back when a job asks for one (checked against the shape and dtype
written).
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autopart.errors import ResourceError
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.limits import available_memory_bytes, format_size
from autopart.settings import tuned
from autopart.targets.codegen import EXACT, Emulating
from autopart.targets.registry import reference_codegen


@dataclass(frozen=True)
class ValuesSettings:
    """How much of the reference's values the profiler keeps in memory."""

    in_memory: int = tuned(
        1 << 30,
        "most bytes of the reference's values held in memory (and never over a quarter of "
        "the memory available): every value in memory took a video transformer's tune to a "
        "peak of 14.6 GiB; the zoo's models hold 0.1-0.3 GiB of values and never spill",
    )
    disk_margin: int = tuned(1 << 30, "free space a spill always leaves in the temporary folder")


VALUES = ValuesSettings()


@dataclass(frozen=True)
class _Spilled:
    path: Path
    shape: tuple[int, ...]
    dtype: np.dtype[Any]


class HeldValues(Mapping[str, Any]):
    """Named values, held in memory up to ``in_memory`` bytes and on disk beyond.

    :meth:`keep` takes a value; an array that would pass the bound is written to a
    temporary folder (``np.save``, no pickle) and read back on each ``[name]``, checked
    against the shape and dtype it had. Other values (sequences, optional absences, object
    arrays) stay in memory. The folder goes with the object, or at :meth:`close`. A spill
    that would leave the folder's disk with less than :attr:`ValuesSettings.disk_margin`
    raises :class:`ResourceError`.
    """

    def __init__(self, in_memory: int) -> None:
        self.in_memory = in_memory
        self.held_bytes = 0
        self.spilled_bytes = 0
        self._memory: dict[str, Any] = {}
        self._disk: dict[str, _Spilled] = {}
        self._folder: Path | None = None
        self._cleanup: weakref.finalize[Any, Any] | None = None

    def keep(self, name: str, value: Any) -> None:
        """Hold ``value`` under ``name`` (replacing any held before)."""
        self._forget(name)
        spillable = isinstance(value, np.ndarray) and value.dtype != object
        if not spillable or self.held_bytes + value.nbytes <= self.in_memory:
            self._memory[name] = value
            self.held_bytes += value.nbytes if isinstance(value, np.ndarray) else 0
            return
        path = self._folder_with_room(value.nbytes) / f"{len(self._disk)}.npy"
        np.save(path, value, allow_pickle=False)
        self._disk[name] = _Spilled(path, value.shape, value.dtype)
        self.spilled_bytes += value.nbytes

    def __getitem__(self, name: str) -> Any:
        if name in self._memory:
            return self._memory[name]
        spilled = self._disk[name]
        value = np.load(spilled.path, allow_pickle=False)
        if value.shape != spilled.shape or value.dtype != spilled.dtype:
            raise ResourceError(
                f"the reference's value {name!r} came back from {spilled.path} as "
                f"{value.dtype}{list(value.shape)}, not the {spilled.dtype}"
                f"{list(spilled.shape)} written"
            )
        return value

    def __iter__(self) -> Iterator[str]:
        yield from self._memory
        yield from self._disk

    def __len__(self) -> int:
        return len(self._memory) + len(self._disk)

    def __contains__(self, name: object) -> bool:
        return name in self._memory or name in self._disk

    def close(self) -> None:
        """Let go of every value and remove the folder of those spilled."""
        self._memory.clear()
        self._disk.clear()
        self.held_bytes = self.spilled_bytes = 0
        if self._cleanup is not None:
            self._cleanup()

    def _forget(self, name: str) -> None:
        old = self._memory.pop(name, None)
        if isinstance(old, np.ndarray):
            self.held_bytes -= old.nbytes
        spilled = self._disk.pop(name, None)
        if spilled is not None:
            self.spilled_bytes -= int(np.prod(spilled.shape)) * spilled.dtype.itemsize
            spilled.path.unlink(missing_ok=True)

    def _folder_with_room(self, nbytes: int) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="autopart-values-"))
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._folder, True)
        free = shutil.disk_usage(self._folder).free
        if nbytes + VALUES.disk_margin > free:
            raise ResourceError(
                f"the reference's values need {format_size(self.spilled_bytes + nbytes)} "
                f"beyond the {format_size(self.in_memory)} kept in memory, and "
                f"{self._folder.parent} has {format_size(free)} free (set TMPDIR to a "
                "larger disk)"
            )
        return self._folder


def reference_values(graph: Graph, in_memory: int | None = None) -> HeldValues:
    """Every non-constant value of ``graph`` on seeded random inputs (the reference codegen).

    Run step by step, holding at once only the values still to be read; what each step
    computes is kept in a :class:`HeldValues` bounded by ``in_memory`` bytes (None: the
    least of :attr:`ValuesSettings.in_memory` and a quarter of the memory available).
    """
    if in_memory is None:
        in_memory = min(VALUES.in_memory, available_memory_bytes() // 4)
    held = HeldValues(in_memory)
    feeds = random_inputs(graph, seed=0)
    compiled = reference_codegen().compile(graph, graph.nodes, graph.inputs, graph.outputs)
    assert isinstance(compiled, Emulating)
    env: dict[str, Any] = dict(feeds)
    for name, value in feeds.items():
        held.keep(name, value)
    for index, node_name in enumerate(compiled.node_names):
        compiled.run_rounded(env, (), EXACT, index, index + 1)
        for name in graph.node(node_name).outputs:
            if name and name in env:
                held.keep(name, env[name])
    for name in graph.outputs:  # an output the reference folded to a constant
        if name not in held and graph.value(name).const is not None:
            held.keep(name, np.asarray(graph.value(name).const))
    return held


def release_values(values: Mapping[str, Any]) -> None:
    """Let go of what :func:`reference_values` kept (any other mapping is left alone)."""
    if isinstance(values, HeldValues):
        values.close()
