"""Copy timing: a microbenchmark per device pair, priced by :mod:`autopart.costmodel.transfer`.

Copies are timed exactly as the plan executor makes them (``dst.from_host(src.to_host(x))``
followed by a synchronisation), over sizes from 4 KiB to 64 MiB.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from autopart.targets.devices import Device

# 4 KiB to 1 MiB in 4x steps, then 2x steps up to 64 MiB: copies leave the caches somewhere
# between 4 and 16 MiB here, and a fit with no sample inside that knee put 10 MB copies
# at 1.4-1.5x their measured time
SIZES = tuple(4096 * 4**k for k in range(4)) + tuple(2**20 * 2**k for k in range(7))


def copy_sampler(src: Device, dst: Device, nbytes: int) -> Callable[[], float]:
    """A function that copies a ``nbytes`` tensor from ``src`` to ``dst`` and returns seconds."""
    # random float32 straight from the generator: normals, then a cast, took 0.7 s per
    # sweep of the sizes, 4 s of every cold profile
    host = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
    tensor = src.from_host(host)
    src.synchronize()

    def sample() -> float:
        start = time.perf_counter()
        dst.from_host(src.to_host(tensor))
        dst.synchronize()
        return time.perf_counter() - start

    return sample
