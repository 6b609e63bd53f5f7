"""How long work reports its progress: the two callbacks every stage accepts.

A :class:`Progress` is told how many of a known number of steps are done and what runs
next (profiling, measuring plans); a :class:`StageProgress` also names the stage of a
longer workflow (``tune``, ``bench``). The command line draws them as progress bars; the
library never prints.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Told before each step, and once more when the work is done."""

    def __call__(self, done: int, total: int, label: str) -> None:
        """``done`` of ``total`` steps are taken and ``label`` runs next (or is ``"done"``)."""
        ...


class StageProgress(Protocol):
    """A :class:`Progress` of one stage of a workflow."""

    def __call__(self, stage: str, done: int, total: int, label: str) -> None:
        """In ``stage``, ``done`` of ``total`` steps are taken and ``label`` runs next.

        ``stage`` is import, profile, search, measure, verify, peers or bench; ``total`` is
        0 when unknown.
        """
        ...
