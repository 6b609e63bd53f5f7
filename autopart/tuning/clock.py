"""A tune's wall-time budget: ``--budget S`` bounds the whole command, not one stage.

The stages run in order, and each bounded one gets what is left less a reserve for the
stages after it (:meth:`Clock.until`). The screen (:mod:`autopart.tuning.screen`) always
runs in full: it gives the incumbent, a plan measured whole, so a tune always has a plan
to return. The reserve for the race is what the screen spent timing whole models, scaled
by the rounds the race takes over the screen's (:func:`race_reserve`): it compiles and
times about as many runners. Where one run is a sizeable share of the budget, a race
with one plan to keep whose least run time cannot fit what is left does not run: the
screen's timings stand (:mod:`~autopart.tuning.screen_verdict`). What the budget cut short
is said in one note.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from autopart.tuning.blocks import WARMUP_ROUNDS
from autopart.tuning.settings import SCREEN, VERIFY

SCREEN_WARMUP = 1  # the screen's warm-up rounds (the race takes blocks.WARMUP_ROUNDS)


def race_reserve(screen_timing_s: float) -> float:
    """The seconds to keep for the race, from what the screen spent timing whole models.

    The race compiles about as many runners as the screen timed, and runs each for
    :attr:`~autopart.tuning.settings.VerifySettings.min_paired_rounds` timed rounds and its
    warm-up, against the screen's :attr:`~autopart.tuning.settings.ScreenSettings.rounds` and one.
    """
    race_rounds = WARMUP_ROUNDS + VERIFY.min_paired_rounds
    return screen_timing_s * race_rounds / (SCREEN_WARMUP + SCREEN.rounds)


@dataclass
class Clock:
    """Seconds of wall time a command may take, counted from ``started`` (None: no budget).

    ``cut`` collects what the budget cut short, one phrase each, for :meth:`note`.
    """

    budget_s: float | None
    started: float = field(default_factory=time.perf_counter)
    cut: list[str] = field(default_factory=list)

    def left_s(self) -> float | None:
        """The seconds left (never below 0; None: no budget)."""
        if self.budget_s is None:
            return None
        return max(self.budget_s - (time.perf_counter() - self.started), 0.0)

    def until(self, reserve_s: float) -> float | None:
        """The seconds a stage may take, keeping ``reserve_s`` for the stages after it."""
        left = self.left_s()
        return None if left is None else max(left - reserve_s, 0.0)

    def covers(self, seconds: float) -> bool:
        """Whether more than ``seconds`` are left (always, with no budget)."""
        left = self.left_s()
        return left is None or left > seconds

    @property
    def passed(self) -> bool:
        """Whether the budget is spent."""
        left = self.left_s()
        return left is not None and left <= 0.0

    def note(self) -> list[str]:
        """One note: the budget, the time taken, and what it cut short (none if nothing)."""
        if self.budget_s is None or not self.cut:
            return []
        took = time.perf_counter() - self.started
        return [
            f"budget {self.budget_s:g} s (took {took:.1f} s) cut short: " + "; ".join(self.cut)
            + " (a larger --budget, or --thorough, measures more)"
        ]  # fmt: skip
