"""Host memory: freed memory stays in the process between runs and goes back between stages;
compiled partitions hold no second copy of their weights."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from autopart.ir.graph import Graph, Node, Value
from autopart.targets.registry import get_codegen

_FAULTS = """
import resource
import numpy as np
import autopart
from autopart.host_memory import retain_freed_memory

def faults_of_a_run() -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    # 4 MiB activations, all live, and one 64 MiB copy (over glibc's largest mmap threshold)
    activations = [np.ones(n, np.float32) for n in (1 << 20, 1 << 20, 1 << 20, 1 << 24)]
    after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    del activations
    return after - before

faults_of_a_run()
print(retain_freed_memory(), min(faults_of_a_run() for _ in range(5)))
"""


def _faults(env: dict[str, str]) -> tuple[bool, int]:
    result = subprocess.run(
        [sys.executable, "-c", _FAULTS], env=env, capture_output=True, text=True, check=True
    )
    applied, faults = result.stdout.split()
    return applied == "True", int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt is Linux-only")
def test_retaining_freed_memory_keeps_activations_in_the_heap() -> None:
    applied, faults = _faults(dict(os.environ, AUTOPART_MALLOC=""))
    assert applied and faults < 100  # 76 MiB is 19456 pages: none faulted in again
    applied, faults = _faults(dict(os.environ, AUTOPART_MALLOC="default"))
    assert not applied and faults > 1000  # the allocator's default: every page, every time


def test_the_profiler_frees_what_it_compiled_when_the_next_partition_would_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import autopart
    from autopart.profile import samplers

    graph = autopart.load("squeezenet")
    assert graph.parameter_bytes(graph.nodes) == graph.parameter_bytes() > 0
    first = graph.nodes[:1]  # its weight and bias, counted once each
    read = {n for node in first for n in node.present_inputs if graph.value(n).is_const}
    assert graph.parameter_bytes(first + first) == sum(graph.value(n).nbytes for n in read) > 0
    compiled: dict[object, object] = {("t", "k"): object()}
    monkeypatch.setattr(samplers, "available_memory_bytes", lambda: 1 << 40)
    samplers.make_room(compiled, graph, graph.nodes)
    assert compiled  # room enough: kept for its next pass
    monkeypatch.setattr(samplers, "available_memory_bytes", lambda: 1 << 20)  # 1 MiB free
    samplers.make_room(compiled, graph, graph.nodes)
    assert compiled == {}


def test_the_profiler_holds_compiles_between_passes_only_within_its_bound() -> None:
    from autopart.profile.samplers import COMPILED_CACHE, CompiledCache

    bound = COMPILED_CACHE.held_weights
    cache = CompiledCache()
    assert cache.keep(("a", "1"), "first", bound // 2)
    assert cache.keep(("b", "1"), "second", bound // 2)  # exactly the bound: held
    assert not cache.keep(("c", "1"), "third", 1)  # one byte more: compiled again next pass
    assert dict(cache) == {("a", "1"): "first", ("b", "1"): "second"}  # the held stay
    assert cache.pop(("a", "1")) == "first" and cache.keep(("c", "1"), "third", 1)
    assert cache.weights == {("b", "1"): bound // 2, ("c", "1"): 1}
    cache.clear()
    assert not cache and not cache.weights and cache.keep(("d", "1"), "fourth", bound)


_RELEASE = """
import gc
import numpy as np
from autopart.host_memory import release_freed_memory, retain_freed_memory, status_bytes

retain_freed_memory()
gc.disable()  # as between the collector's rare full passes
class Holder:
    pass
holder = Holder()
holder.self = holder  # a cycle: only the collector frees it
holder.buffers = [np.ones(1 << 22, np.float32) for _ in range(64)]  # 1 GiB in 16 MiB blocks
del holder
kept = status_bytes("VmRSS")
release_freed_memory()
print((kept - status_bytes("VmRSS")) >> 20)
"""


def test_releasing_between_stages_frees_cycle_held_buffers_back_to_the_kernel() -> None:
    """Buffers held only by a reference cycle, in a heap that keeps what is freed, leave
    the resident set once released: a stage's peak is not carried into the next."""
    pytest.importorskip("ctypes")
    done = subprocess.run(
        [sys.executable, "-c", _RELEASE], capture_output=True, text=True, check=True
    )
    assert int(done.stdout.split()[-1]) > 900  # MiB handed back, of 1024


@pytest.mark.parametrize("codegen", ["onnxruntime", "openvino"])
def test_a_compiled_partition_keeps_no_copy_of_its_serialised_model(codegen: str) -> None:
    """Held through a race, the bytes would double the weights each compiled plan holds."""
    compiler = get_codegen(codegen)
    if not compiler.available():
        pytest.skip(f"{codegen} is not installed")
    weight = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    values = {
        "x": Value("x", (1, 256), np.dtype(np.float32)),
        "w": Value("w", (256, 256), np.dtype(np.float32), const=weight),
        "y": Value("y", (1, 256), np.dtype(np.float32)),
    }
    node = Node("mm", "MatMul", ["x", "w"], ["y"])
    graph = Graph("matmul", [node], values, ["x"], ["y"], {"": 17})
    compiled = compiler.compile(graph, graph.nodes, ["x", "w"], ["y"])
    holders = [compiled, getattr(compiled, "session", None)]  # onnxruntime's session too
    held = [
        value
        for holder in holders
        if holder is not None
        for value in vars(holder).values()
        if isinstance(value, bytes | bytearray)
    ]
    assert all(len(value) < weight.nbytes for value in held)
    assert len(compiled.model_bytes) > weight.nbytes  # made again when asked
    assert compiled.model_bytes == compiled.model_bytes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise advice is Linux's")
def test_paging_out_drops_a_mapped_files_pages_and_it_reads_back_the_same(
    tmp_path: pytest.TempPathFactory,
) -> None:
    """A library's mapping of weights it has copied stops counting in the resident set."""
    import mmap
    from pathlib import Path

    from autopart.host_memory import mapped_resident_bytes, page_out

    weights = np.random.default_rng(0).standard_normal(1 << 23).astype(np.float32)  # 32 MiB
    path = Path(str(tmp_path)) / "w.bin"
    weights.tofile(path)
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
        mapped = np.frombuffer(m, np.float32)
        total = float(mapped.sum(dtype=np.float64))  # every page read: resident
        assert mapped_resident_bytes(path.parent) >= weights.nbytes * 0.9
        advised = page_out(path.parent)
        assert advised >= weights.nbytes
        assert mapped_resident_bytes(path.parent) < weights.nbytes * 0.1
        assert page_out(path.parent / "elsewhere") == 0  # only files under the folder
        assert float(mapped.sum(dtype=np.float64)) == total  # read back from the file
        del mapped


_FREEZE = """
import gc, weakref
import numpy as np
from autopart.host_memory import freeze_loaded_objects

class Holder:
    pass

dead = Holder()
dead.cycle = dead
dead.buffer = np.ones(1 << 20)
witness = weakref.ref(dead)
del dead
freeze_loaded_objects()
print(witness() is None, gc.get_freeze_count() > 10000, gc.collect())
"""

_LAUNCHED = """
import atexit, gc, sys
atexit.register(lambda: print("frozen", gc.get_freeze_count()))
sys.argv = ["autopart", "--version"]
from autopart.launcher import main
main()
"""


def test_freezing_collects_what_was_dead_first_and_leaves_the_rest_out_of_passes() -> None:
    """What was cyclic garbage before the freeze is freed, not kept for good; the live
    objects (the imported modules') leave the collector's passes."""
    done = subprocess.run(
        [sys.executable, "-c", _FREEZE], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["True", "True", "0"]


def test_the_console_script_freezes_its_imported_modules_before_the_command_runs() -> None:
    """The launcher owns its process, so the CLI's imports are frozen before any stage."""
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCHED], capture_output=True, text=True, check=False
    )
    frozen = int(done.stdout.split("frozen")[-1])
    assert frozen > 50_000, done.stdout
