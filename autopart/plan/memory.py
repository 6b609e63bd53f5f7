"""Storage planning: boundary tensors share buffers within a device once their last use passes.

A buffer belongs to exactly one device. Values are placed greedily in step order into the
smallest free buffer of their device that is large enough (growing the largest free one
otherwise), which is the classic best-fit interval packing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Lifetime:
    """A tensor resident on ``device`` from step ``first`` to step ``last`` inclusive."""

    value: str
    device: str
    nbytes: int
    first: int
    last: int


@dataclass
class Buffer:
    """One allocation on one device, reused by values whose lifetimes do not overlap."""

    id: int
    device: str
    nbytes: int = 0
    values: list[str] = field(default_factory=list)


def plan_buffers(lifetimes: Sequence[Lifetime]) -> dict[str, list[Buffer]]:
    """Assign every lifetime to a buffer of its own device; returns buffers per device."""
    buffers: dict[str, list[Buffer]] = {}
    busy_until: dict[int, int] = {}
    next_id = 0
    for life in sorted(lifetimes, key=lambda item: (item.first, -item.nbytes, item.value)):
        pool = buffers.setdefault(life.device, [])
        free = [b for b in pool if busy_until[b.id] < life.first]
        fitting = [b for b in free if b.nbytes >= life.nbytes]
        if fitting:
            chosen = min(fitting, key=lambda b: b.nbytes)
        elif free:
            chosen = max(free, key=lambda b: b.nbytes)
            chosen.nbytes = life.nbytes
        else:
            chosen = Buffer(next_id, life.device)
            next_id += 1
            chosen.nbytes = life.nbytes
            pool.append(chosen)
        chosen.values.append(life.value)
        busy_until[chosen.id] = life.last
    return buffers


def peak_bytes(lifetimes: Sequence[Lifetime], device: str) -> int:
    """The largest total size of ``device``'s tensors alive at any one step."""
    events: dict[int, int] = {}
    for life in lifetimes:
        if life.device == device:
            events[life.first] = events.get(life.first, 0) + life.nbytes
            events[life.last + 1] = events.get(life.last + 1, 0) - life.nbytes
    peak = current = 0
    for step in sorted(events):
        current += events[step]
        peak = max(peak, current)
    return peak
