"""The memo of a bring-your-own-codegen's support probes: one answer per op signature.

onnxruntime and OpenVINO learn what they support by compiling a one-node model; a probe
costs milliseconds, so each codegen keeps the answer per signature for the process. Plans
are built from several threads, hence the lock, taken only when an answer is missing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable


class ProbeCache:
    """``(supported, reason)`` per probe key, each computed once per process."""

    def __init__(self) -> None:
        self._answers: dict[Hashable, tuple[bool, str]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, probe: Callable[[], tuple[bool, str]]) -> tuple[bool, str]:
        """The answer under ``key``, running ``probe`` the first time it is asked."""
        cached = self._answers.get(key)
        if cached is not None:
            return cached
        with self._lock:
            cached = self._answers.get(key)
            if cached is None:
                cached = self._answers[key] = probe()
        return cached

    def known(self, key: Hashable) -> bool:
        """Whether an answer under ``key`` is kept."""
        return key in self._answers

    def put(self, key: Hashable, answer: tuple[bool, str]) -> None:
        """Keep ``answer`` under ``key`` unless one is kept already (the first one stands)."""
        with self._lock:
            self._answers.setdefault(key, answer)

    def clear(self) -> None:
        """Forget every answer."""
        self._answers.clear()
