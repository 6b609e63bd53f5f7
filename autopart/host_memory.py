"""Keeping freed host memory in the process, so that buffers are not faulted in every run.

glibc hands blocks over 128 KiB straight back to the kernel when they are freed (``mmap``
threshold), and trims the heap top above 128 KiB. An inference run allocates the same
activations every time, so each run faults every page of every large activation in again:
on this project's 2-core VM that made a chain of numpy ops 1.5x to 3x slower than the same
ops timed one by one (squeezenet on numpy: 15.4 ms against 10.4 ms with memory kept), and
made one-op timings a poor guide to whole-model latency. Raising both thresholds keeps the
freed blocks in the heap for the next run, as onnxruntime's arena does for its own tensors.
glibc caps the mmap threshold at 32 MiB, so blocks of that size and more are also kept off
``mmap`` altogether (``M_MMAP_MAX`` 0; glibc still falls back to ``mmap`` when the heap
cannot grow). Without that, a 48-64 MiB copy from an OpenCL device to the host ran at
4.2-5.4 GB/s against 9.2-9.7 GB/s with it, and copy times jumped at 32 MiB.
The price is that the process keeps its peak heap size: a command of several stages
hands the freed heap back between them (:func:`release_freed_memory`), so that one stage's
peak is not carried into the next.

Set ``AUTOPART_MALLOC=default`` to leave the allocator as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
from pathlib import Path

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest allowed value on 64-bit
TRIM_THRESHOLD_BYTES = 1 << 30

_applied: bool | None = None


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library, loaded once (finding it may run ``ldconfig``, a process of its own)."""
    return ctypes.CDLL(ctypes.util.find_library("c"))


def retain_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds and stop its mmap use, once per process.

    Returns whether the settings are in force.

    A no-op returning ``False`` where ``AUTOPART_MALLOC=default`` is set or the C library
    has no ``mallopt`` (not glibc).
    """
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get("AUTOPART_MALLOC", "") == "default":
        return False
    try:
        mallopt = _libc().mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _applied = bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
        and mallopt(M_MMAP_MAX, 0)
    )
    return _applied


def freeze_loaded_objects() -> None:
    """Exempt every object alive now from the cyclic collector's passes, for good.

    For a process that owns its interpreter (the console script), once its modules are
    imported: their ~140k functions, types and dicts live as long as the process, yet every
    full collection walked them. Each of a resnet50 tune's 45 collections in
    :func:`release_freed_memory` took 0.09-0.14 s and found nothing but the stage's
    garbage: 4.7 s of a 57 s tune. Garbage already in cycles is collected first, so that
    freezing keeps nothing that was dead. Never for a library's caller: their objects are
    theirs to collect.
    """
    gc.collect()
    gc.freeze()


def release_freed_memory() -> bool:
    """Collect cyclic garbage, then hand the heap's free pages back to the kernel.

    For the end of a stage whose buffers are gone (a tune's screen, its sensitivities):
    the next stage's runs fault their own buffers in once, and keep them. Arrays held only
    by reference cycles (a compiled runner's closures) are freed by the collection: numpy
    buffers barely count towards the collector's thresholds, so without it a tune of
    resnet50 carried 0.6 GiB of dead buffers from stage to stage. Returns whether glibc's
    ``malloc_trim`` released anything (``False`` where the C library has none).
    """
    gc.collect()
    try:
        trim = _libc().malloc_trim
    except (OSError, AttributeError, TypeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))


MADV_PAGEOUT = 21  # Linux 5.4 and later


def page_out(folder: Path) -> int:
    """Advise the kernel to drop this process's mapped pages of the files under ``folder``.

    For files a library mapped to read weights from and has since copied into its own
    layout: OpenVINO keeps the model it compiled, and with it the mapping of every weight
    file, beside the weights it reordered (vgg19 in f32: 0.55 GiB of mapped file over 0.57
    of its own, counted twice in the resident set). The pages are clean, so they are
    dropped, not written (``MADV_PAGEOUT``); a page touched again is read back from its
    file. Returns the bytes of the mappings advised: 0 where ``/proc/self/maps`` or
    ``madvise`` is missing, or the kernel refuses the advice (before Linux 5.4).
    """
    prefix = f"{folder}/"
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as handle:
            spans = [
                [int(bound, 16) for bound in fields[0].split("-")]
                for fields in (line.split(maxsplit=5) for line in handle)
                if len(fields) == 6 and fields[5].startswith(prefix)
            ]
        madvise = _libc().madvise
    except (OSError, AttributeError, ValueError):
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return sum(
        end - start for start, end in spans if madvise(start, end - start, MADV_PAGEOUT) == 0
    )


def mapped_resident_bytes(folder: Path) -> int:
    """The resident bytes of this process's mappings of files under ``folder`` (0 if unknown)."""
    prefix, total, inside = f"{folder}/", 0, False
    try:
        with open("/proc/self/smaps", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                fields = line.split(maxsplit=5)
                if fields and "-" in fields[0] and not fields[0].endswith(":"):  # a mapping
                    inside = len(fields) == 6 and fields[5].startswith(prefix)
                elif inside and fields[0] == "Rss:":
                    total += int(fields[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return total


def status_bytes(field: str) -> int | None:
    """A size field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``...) in bytes; None if absent."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def peak_memory_bytes() -> int:
    """The most resident memory this process has held so far, in bytes (0 where unknown).

    The kernel's high-water mark of the resident set (``VmHWM``, else ``ru_maxrss``), so it
    counts what the libraries allocate as well as Python's own.
    """
    peak = status_bytes("VmHWM")
    if peak is not None:
        return peak
    try:
        import resource
    except ImportError:  # not a Unix
        return 0
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
