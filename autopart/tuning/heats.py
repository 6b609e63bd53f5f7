"""Heats: racing plans a few at a time, to hold only so many compiled plans in memory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Heats:
    """Racing plans a few at a time, to hold only so many compiled plans in memory.

    At most ``held`` plans (2 or more) are compiled at once, beside the peers, which run in
    every round: the plans enter in the order given, each as another leaves the race
    (eliminated, failed, or, while plans wait, done with its rounds and not the quickest
    held). Each plan is paired with the runners that ran in its rounds. ``admitting(s)``:
    whether a heat of ``s`` seconds may still start (asked with 0 before every round, and
    before a plan enters with what the last heat took). Once it says no, the plans still
    waiting are left out, each with a reason in ``failures``.
    """

    held: int
    admitting: Callable[[float], bool] = lambda seconds: True

    def __post_init__(self) -> None:
        if self.held < 2:
            raise ValueError(f"heats must hold at least 2 plans, not {self.held}")
