"""CPU units in practice: which cores this process may use, and pinning a thread to some.

A host unit is a set of cores (:class:`~autopart.targets.devices.Unit`). A codegen that
computes on the calling thread honours its unit by pinning that thread for the duration of
a call with :func:`pinned_to`; on Linux ``os.sched_setaffinity(0, ...)`` changes the calling
thread's mask only, so threads that run other units at the same time are unaffected.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache

from autopart.errors import TargetError


def allowed_cores() -> list[int]:
    """The cores the calling thread may run on, sorted (empty where the OS cannot say)."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    return sorted(os.sched_getaffinity(0))


@contextmanager
def pinned_to(cores: Sequence[int]) -> Iterator[None]:
    """Pin the calling thread to ``cores`` for the block; restore its previous mask after.

    An empty ``cores`` (or a platform without affinity control) leaves the thread alone.
    The mask is restored even when the block raises. Raises :class:`TargetError` when the
    cores are not available to this process.
    """
    if not cores or not hasattr(os, "sched_setaffinity"):
        yield
        return
    previous = os.sched_getaffinity(0)
    wanted = set(cores)
    if previous == wanted:
        yield
        return
    try:
        os.sched_setaffinity(0, wanted)
    except OSError as error:
        message = f"cannot pin the calling thread to cores {sorted(wanted)}: {error}"
        raise TargetError(message) from None
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)


@cache
def cpu_flags() -> frozenset[str] | None:
    """The instruction-set flags of this machine's CPU (``/proc/cpuinfo``), or None.

    None where the OS does not say (not Linux, or the file cannot be read): callers then
    trust their library's own probe.
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("flags") and ":" in line:
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        return None
    return None


# CPU flags of units that multiply u8 by i8 and sum into i32 in one instruction.
WIDE_INT8_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def int8_sums_in_i16() -> bool:
    """Whether this CPU's int8 kernels sum u8 x i8 pairs in i16 (AVX2's vpmaddubsw).

    True where the flags show none of :data:`WIDE_INT8_FLAGS`: a pair of products of full
    ranges (255 x 127, twice) overflows i16 and saturates, so weights are quantised to 7
    bits there (onnxruntime's ``reduce_range``, NNCF's overflow fix). False where the OS
    does not say (the library's own probe, and the measured error, judge then).
    """
    flags = cpu_flags()
    return flags is not None and not flags & WIDE_INT8_FLAGS
