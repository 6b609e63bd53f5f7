"""autopart: cost-model-driven partitioning of ONNX models across heterogeneous compute.

The public names below load on first use, so ``import autopart`` is cheap and changes
nothing in the process (the ``autopart`` command prepares its own; see
:mod:`autopart.launcher`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autopart.api import BenchOptions, TuneOptions, bench, info, load, run, tune
    from autopart.errors import AutopartError
    from autopart.ir import Graph, Node, Value, VirtualDevice
    from autopart.zoo import load_zoo_model, zoo_names

__version__ = "0.1.0"

_HOMES = {
    "AutopartError": "autopart.errors",
    "BenchOptions": "autopart.api",
    "Graph": "autopart.ir",
    "Node": "autopart.ir",
    "TuneOptions": "autopart.api",
    "Value": "autopart.ir",
    "VirtualDevice": "autopart.ir",
    "bench": "autopart.api",
    "info": "autopart.api",
    "load": "autopart.api",
    "load_zoo_model": "autopart.zoo",
    "run": "autopart.api",
    "tune": "autopart.api",
    "zoo_names": "autopart.zoo",
}
__all__ = [
    "AutopartError",
    "BenchOptions",
    "Graph",
    "Node",
    "TuneOptions",
    "Value",
    "VirtualDevice",
    "bench",
    "info",
    "load",
    "load_zoo_model",
    "run",
    "tune",
    "zoo_names",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its home module on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'autopart' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
