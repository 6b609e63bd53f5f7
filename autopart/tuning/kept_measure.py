"""The measurement a kept plan is saved with when the race kept no round of it.

Under a spent budget the race may keep a peer whose plan it never ran under the plan's own
name (:func:`~autopart.tuning.choice.final_choice`); the plan saved still gets a
measurement, and a note says where it came from (:func:`measured_outside_race`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from autopart.tuning.choice import Decision
from autopart.tuning.verify import Measured


def measured_outside_race(
    kept: str,
    decision: Decision | None,
    measured: dict[str, Measured],
    peer_results: Mapping[str, Measured],
    whole: Mapping[str, Measured] | None = None,
) -> list[str]:
    """Give the kept plan no round of which the race kept a measurement from elsewhere.

    First the screen's whole timing of that very plan (``whole``, by candidate name): its
    own rounds, its own outputs judged; those rounds ran in no round of the race, so they
    are renumbered to pair with none (:func:`~autopart.tuning.choice.paired_ratio`). Else,
    when the race kept a peer for it, the peer's: a peer stands for a plan of one partition
    compiled as its library compiles the model alone (one compile or session,
    :mod:`autopart.targets.held`), so its rounds time that plan, and its judged error is
    the peer's. Either goes into ``measured`` under ``kept``, with a note that says
    which. A plan with neither gets the note that it was not measured. Returns
    the notes.
    """
    if kept in measured:
        return []
    if whole is not None and kept in whole and whole[kept].latencies:
        measured.update(timed_apart({kept: whole[kept]}))
        return [f"{kept} is measured by the screen's whole timing: the race kept no round of it"]
    peer = None if decision is None else decision.chosen
    if peer is not None and peer in peer_results:
        measured[kept] = peer_results[peer]
        return [
            f"{kept} is measured as {peer}, which runs this plan: the race kept no round "
            "of the plan under its own name"
        ]
    return [f"the plan saved, {kept}, was not measured: no round of it was kept"]


def timed_apart(
    results: Mapping[str, Measured], tolerance: float | None = None, first: int = 0
) -> dict[str, Measured]:
    """Copies of the screen's ``results`` whose rounds pair with no race round, nor each other.

    The screen timed each runner in a session of its own, so its rounds get negative
    indices (no race round has one), distinct across runners from the ``first``-th on
    (:func:`~autopart.tuning.choice.paired_rounds` pairs none of them); held to
    ``tolerance`` (None: as measured). The lists are copied: the screen keeps its own.
    """
    apart: dict[str, Measured] = {}
    for offset, (name, result) in enumerate(results.items(), start=first):
        start = -(offset + 1) * 1000
        apart[name] = dataclasses.replace(
            result,
            latencies=list(result.latencies),
            round_medians=list(result.round_medians),
            round_indices=[start - index for index in range(len(result.round_medians))],
            tolerance=result.tolerance if tolerance is None else tolerance,
        )
    return apart


def measured_as_peers(
    measured: dict[str, Measured], peer_results: Mapping[str, Measured], as_peer: Mapping[str, str]
) -> list[str]:
    """Give each plan timed as a peer (``as_peer``: by plan, the peer's name) that peer's rounds.

    The race timed the peer alone for them (:attr:`~autopart.tuning.entrants.Entrants.as_peer`):
    one compiled model, so its rounds, paired as they ran, and its judged error are the
    plan's. A plan whose peer left no measurement (it failed) gets none. Returns one note
    naming them, or none.
    """
    named = []
    for plan, peer in as_peer.items():
        if plan in measured or peer not in peer_results:
            continue
        result = peer_results[peer]
        measured[plan] = dataclasses.replace(
            result,
            latencies=list(result.latencies),
            round_medians=list(result.round_medians),
            round_indices=list(result.round_indices),
        )
        named.append(f"{plan} as {peer}")
    if not named:
        return []
    return [
        f"timed as the peer that runs each, one compiled model timed once a round: "
        f"{', '.join(named)}"
    ]
