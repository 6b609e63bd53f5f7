"""One size guard: declared tensor sizes weighed against the memory this process can get.

Every place that would allocate what a user's file declares (a model's constants and
shapes, an ``.npz`` of inputs, a saved plan or profile) asks :func:`check_fits` first, so a
hostile or mistaken size is one clear error instead of a MemoryError, swapping or the
kernel's OOM killer.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from autopart.errors import ResourceError
from autopart.host_memory import status_bytes


def _meminfo(field: str) -> int | None:
    """A field of ``/proc/meminfo`` (``MemAvailable``, ``MemTotal``) in bytes; None if absent."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _address_space_left() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    return max(soft - (status_bytes("VmSize") or 0), 0)


_memory_limit: int | None = None


def _limit_left() -> int | None:
    if _memory_limit is None:
        return None
    return max(_memory_limit - (status_bytes("VmRSS") or 0), 0)


@contextmanager
def memory_limit(nbytes: int | None) -> Iterator[None]:
    """Within, hold this process to ``nbytes`` of resident memory (None: no limit of its own).

    Every size guard (:func:`check_fits`) then weighs what it would allocate against the
    limit less what the process holds, as well as against the machine's free memory, so a
    plan or a measurement that would pass the limit is refused with one line instead of
    allocated. Restores the limit in force before on exit.
    """
    global _memory_limit
    before = _memory_limit
    _memory_limit = nbytes
    try:
        yield
    finally:
        _memory_limit = before


def available_memory_bytes() -> int:
    """The bytes this process can still allocate: free memory, within its address-space limit.

    And within the limit of :func:`memory_limit`, where one is in force.
    """
    candidates = [_meminfo("MemAvailable"), _address_space_left(), _limit_left()]
    if candidates[0] is None:
        pages = os.sysconf("SC_AVPHYS_PAGES") if hasattr(os, "sysconf") else 0
        candidates[0] = int(pages) * int(os.sysconf("SC_PAGE_SIZE")) if pages else None
    known = [value for value in candidates if value is not None]
    return min(known) if known else 1 << 62


def format_size(nbytes: float) -> str:
    """``nbytes`` in B, KiB, MiB or GiB, as tables and error messages show sizes."""
    for unit in ("B", "KiB", "MiB"):
        if nbytes < 1024:
            return f"{int(nbytes)} B" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} GiB"


def check_fits(nbytes: int, what: str) -> None:
    """Raise :class:`ResourceError` when ``nbytes`` exceed the memory available.

    ``what`` names the data in the message, e.g. ``"input 'x' float32[100000, 100000]"``.
    """
    available = available_memory_bytes()
    if nbytes > available:
        raise ResourceError(
            f"{what} needs {format_size(nbytes)}, more than the {format_size(available)} "
            "of memory available"
        )


WATCH_INTERVAL_S = 0.1
FREE_FLOOR_BYTES = 1 << 30  # the machine's last free memory a command never takes
FREE_FLOOR_SHARE = 0.10  # or this share of a smaller machine's memory


def over_memory(floor: int) -> str | None:
    """Why this process must stop now (its limit passed, the machine nearly out), or None."""
    held = status_bytes("VmRSS") or 0
    if _memory_limit is not None and held > _memory_limit:
        return (
            f"it holds {format_size(held)}, over its --memory-limit of {format_size(_memory_limit)}"
        )
    free = _meminfo("MemAvailable")
    if free is not None and free < floor:
        return (
            f"the machine has {format_size(free)} of memory left and this process holds "
            f"{format_size(held)}"
        )
    return None


@contextmanager
def memory_watch(activity: Callable[[], str]) -> Iterator[None]:
    """Within, stop the process with one ``error:`` line before memory runs out.

    A thread checks, every :data:`WATCH_INTERVAL_S`, the resident set against
    :func:`memory_limit`'s limit and the machine's free memory against a floor
    (:data:`FREE_FLOOR_BYTES`, or :data:`FREE_FLOOR_SHARE` of a smaller machine). Past
    either, it writes ``error: out of memory while <activity()>: <why>`` and ends the
    process with status 2: a library compiling a model can grow by gigabytes in one call
    that no size guard foresees (:func:`check_fits`), and the kernel's OOM killer would end
    it, or another process, with no word. Files are written atomically, so whatever was
    saved stays whole. For commands only: it ends the process, not a call.
    """
    total = _meminfo("MemTotal")
    floor = (
        FREE_FLOOR_BYTES if total is None else min(FREE_FLOOR_BYTES, int(FREE_FLOOR_SHARE * total))
    )
    stopped = threading.Event()

    def watch() -> None:
        while not stopped.wait(WATCH_INTERVAL_S):
            why = over_memory(floor)
            if why is not None:
                sys.stderr.write(f"error: out of memory while {activity()}: {why}; stopped\n")
                sys.stderr.flush()
                os._exit(2)

    watcher = threading.Thread(target=watch, name="memory-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stopped.set()
