"""A deadline for compiling: a caller may bound how long a library compiles a model.

A library can take minutes to compile a large model (OpenVINO compiled a 50,000-op
elementwise chain for over 10 minutes on 2 cores), longer than a tune's whole budget. A
caller that would rather skip such a model wraps the compile in :func:`compiling_within`;
a codegen that can stop its library mid-compile (OpenVINO, in a worker process) checks
:func:`compile_deadline` and raises :class:`CompileTimeoutError` when it passes. Codegens that
cannot stop their library ignore it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

from autopart.errors import TargetError

_DEADLINE: ContextVar[float | None] = ContextVar("compile_deadline", default=None)


class CompileTimeoutError(TargetError):
    """A library did not finish compiling before the deadline, and was stopped."""


@contextlib.contextmanager
def compiling_within(seconds: float | None) -> Iterator[None]:
    """Within the block, compiles that can be stopped end ``seconds`` from now.

    A deadline only ever comes sooner: within an enclosing block, the earlier of the two
    holds, and None (no deadline of its own) keeps the enclosing one.
    """
    outer = _DEADLINE.get()
    own = None if seconds is None else time.perf_counter() + max(seconds, 0.0)
    token = _DEADLINE.set(own if outer is None else outer if own is None else min(own, outer))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def compile_deadline() -> float | None:
    """Seconds left before the current deadline (never below 0), or None where none is set."""
    deadline = _DEADLINE.get()
    return None if deadline is None else max(deadline - time.perf_counter(), 0.0)
