"""The numpy reference's values of a graph, as the profiler times ops on them.

Every op is timed on its real inputs, so the profiler keeps every value the reference
computes. Added up, those outgrow memory on models with large activations: a video
transformer's 1,644 values view 4.2 GiB of buffers, though a run holds 0.5 GiB at once.
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
        "most bytes of buffers of the reference's values held in memory (and never over a "
        "quarter of the memory available): a video transformer's 4.2 GiB held at once took "
        "its process to 4.75 GB, 1.6 GB with this bound, 3.3 GiB written to disk",
    )
    disk_margin: int = tuned(1 << 30, "free space a spill always leaves in the temporary folder")


VALUES = ValuesSettings()


@dataclass(frozen=True)
class _Spilled:
    """A value on disk: the array in ``path`` (of ``stored``), or a view of it.

    A view is ``shape`` and ``dtype`` at ``offset`` bytes into the stored buffer, with
    ``strides`` (None: the stored array itself).
    """

    path: Path
    stored: tuple[tuple[int, ...], np.dtype[Any]]
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    offset: int = 0
    strides: tuple[int, ...] | None = None


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
        self._roots: dict[int, tuple[np.ndarray, int]] = {}  # id: (array, names on it)
        self._written = 0
        self._written_roots: dict[int, tuple[weakref.ref[np.ndarray], Path]] = {}
        self._folder: Path | None = None
        self._cleanup: weakref.finalize[Any, Any] | None = None

    def keep(self, name: str, value: Any) -> None:
        """Hold ``value`` under ``name`` (replacing any held before).

        An array counts the bytes of the buffer it views (its root array), once however
        many values view it: a Reshape or a Transpose of a value held costs nothing more.
        """
        self._forget(name)
        if not isinstance(value, np.ndarray) or value.dtype == object:
            self._memory[name] = value
            return
        root = _root(value)
        held = self._roots.get(id(root))
        if held is None and self.held_bytes + root.nbytes > self.in_memory:
            self._spill(name, value, root)
            return
        if held is None:
            self.held_bytes += root.nbytes
        self._roots[id(root)] = (root, 1 if held is None else held[1] + 1)
        self._memory[name] = value

    def _spill(self, name: str, value: np.ndarray, root: np.ndarray) -> None:
        """Write ``value`` (viewing ``root``'s buffer) to disk; a C-contiguous buffer once."""
        if root is value or not root.flags.c_contiguous:
            path = self._write(value)
            self._disk[name] = _Spilled(path, (value.shape, value.dtype), value.shape, value.dtype)
            return
        known = self._written_roots.get(id(root))
        path = known[1] if known is not None and known[0]() is root else self._write(root)
        offset = value.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        stored = (root.shape, root.dtype)
        self._disk[name] = _Spilled(path, stored, value.shape, value.dtype, offset, value.strides)

    def _write(self, array: np.ndarray) -> Path:
        """``array`` written to a new file of the folder, remembered while it lives."""
        path = self._folder_with_room(array.nbytes) / f"{self._written}.npy"
        self._written += 1
        np.save(path, array, allow_pickle=False)
        self._written_roots[id(array)] = (weakref.ref(array), path)
        self.spilled_bytes += array.nbytes
        return path

    def __getitem__(self, name: str) -> Any:
        if name in self._memory:
            return self._memory[name]
        spilled = self._disk[name]
        stored = np.load(spilled.path, allow_pickle=False)
        if (stored.shape, stored.dtype) != spilled.stored:
            raise ResourceError(
                f"the reference's value {name!r} came back from {spilled.path} as "
                f"{stored.dtype}{list(stored.shape)}, not the {spilled.stored[1]}"
                f"{list(spilled.stored[0])} written"
            )
        if spilled.strides is None:
            return stored
        return np.ndarray(spilled.shape, spilled.dtype, stored, spilled.offset, spilled.strides)

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
        self._roots.clear()
        self._written_roots.clear()
        self.held_bytes = self.spilled_bytes = 0
        if self._cleanup is not None:
            self._cleanup()

    def _forget(self, name: str) -> None:
        old = self._memory.pop(name, None)
        if isinstance(old, np.ndarray) and old.dtype != object:
            root, names = self._roots[id(_root(old))]
            if names > 1:
                self._roots[id(root)] = (root, names - 1)
            else:
                del self._roots[id(root)]
                self.held_bytes -= root.nbytes
        spilled = self._disk.pop(name, None)
        if spilled is not None and all(s.path != spilled.path for s in self._disk.values()):
            shape, dtype = spilled.stored
            self.spilled_bytes -= int(np.prod(shape)) * dtype.itemsize
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


def _root(array: np.ndarray) -> np.ndarray:
    """The array whose buffer ``array`` views (itself if it owns its data)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


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
