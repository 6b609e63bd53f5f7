"""Importing a script of ``experiments/`` in a test, as the script itself runs."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).parents[1] / "experiments"


def import_experiment(name: str) -> ModuleType:
    """The module ``experiments/<name>.py``, with ``experiments/`` on the path while it loads.

    Its own imports (``_common``, ``heldout.suite``) resolve as they do when it runs as a
    script; the path is restored afterwards.
    """
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)
