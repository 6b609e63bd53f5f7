"""What ``autopart tune`` reports: the plan kept, every candidate's figures, the peers'."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autopart.plan.schema import Plan
from autopart.profile import ProfileReport
from autopart.search.planner import SearchOutcome
from autopart.tuning import choice
from autopart.tuning.judge import Judge
from autopart.tuning.plan_rows import PlanRow
from autopart.tuning.screen import Screening
from autopart.tuning.verify import Measured


@dataclass
class TuneReport:
    """What a tune did and where it saved it.

    ``chosen`` names the plan kept (``plan``, saved at ``plan_path``), ``search_pick`` the
    one the search preferred before running; ``rows`` has every candidate's predicted and
    measured figures; ``planned_only`` says nothing ran (another machine's profile);
    ``decision`` is how the measurements chose (None when nothing was measured);
    ``partitions_measured`` reports the candidate partitions timed whole before the race;
    ``screening`` what the screen measured and kept (None: no screen ran); ``judge`` what
    judged the outputs (:mod:`autopart.tuning.judge`; None: nothing was judged here).
    ``peers`` and ``measured`` hold the peers' and the plans' measurements, by name (the
    plans' under every twin's name too).
    """

    model: str
    directory: Path
    plan_path: Path
    plan: Plan
    chosen: str
    search_pick: str
    outcome: SearchOutcome
    rows: list[PlanRow]
    profiled: ProfileReport | None
    planned_only: bool
    notes: list[str] = field(default_factory=list)
    peers: dict[str, Measured] = field(default_factory=dict)
    decision: choice.Decision | None = None
    partitions_measured: ProfileReport | None = None
    screening: Screening | None = None
    judge: Judge | None = None
    measured: dict[str, Measured] = field(default_factory=dict)

    @property
    def vs_best_peer(self) -> float | None:
        """The chosen plan's median over the quickest peer's within the tolerance.

        As ``bench``'s: over the rounds both ran (:func:`~autopart.tuning.choice.paired_ratio`),
        and a peer whose outputs are beyond the tolerance (OpenVINO as installed under
        ``--precision f32``) is no bar. None when no such peer ran, or the chosen plan was
        not measured.
        """
        chosen, best = self.measured.get(self.chosen), self.best_peer
        if chosen is None or best is None:
            return None
        return choice.paired_ratio(chosen, self.peers[best])

    @property
    def apart_from_best_peer(self) -> bool:
        """Whether :attr:`vs_best_peer` compares runs timed apart: no round of both.

        So when the screen's timings decided (:mod:`~autopart.tuning.screen_verdict`), or
        the plan was measured outside the race: the ratio then carries the drift between
        two sessions, with no interval.
        """
        chosen, best = self.measured.get(self.chosen), self.best_peer
        if chosen is None or best is None:
            return False
        return not choice.paired_rounds(chosen, self.peers[best])[0]

    @property
    def best_peer(self) -> str | None:
        """The quickest peer within the tolerance (:func:`~autopart.tuning.choice.best_peer`)."""
        return choice.best_peer(self.peers)
