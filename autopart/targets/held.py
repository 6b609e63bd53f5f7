"""Compiled models and sessions shared while a runner holds them.

A tune holds several runners of one model at once: a library as installed and the
whole-device plan it stands for, both compiled from the model as shipped with the same
effective options, race side by side. Compiling or creating the second is wasted time and
a second copy of the weights (a 12,400-node stack: 3-4 s an OpenVINO import, 2-3 s an
onnxruntime session). :class:`Held` gives a key's object to whoever asks while anyone
still holds it, and forgets it, by weak reference, once no one does.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any


class Held:
    """Objects by key, kept only while something else holds them; thread-safe.

    Two threads asking for an absent key at once may both make it; the later one is kept.
    """

    def __init__(self) -> None:
        self._held: weakref.WeakValueDictionary[Hashable, Any] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def get_or_make(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The object held under ``key``, else ``make()``'s, then known under ``key``."""
        with self._lock:
            held = self._held.get(key)
        if held is not None:
            return held
        made = make()
        with self._lock:
            self._held[key] = made
        return made

    def __len__(self) -> int:
        """How many objects are held now."""
        with self._lock:
            return len(self._held)

    def values(self) -> list[Any]:
        """The objects held now."""
        with self._lock:
            return list(self._held.values())

    def clear(self) -> None:
        """Forget every object: the next ask for any key makes it anew."""
        with self._lock:
            self._held.clear()
