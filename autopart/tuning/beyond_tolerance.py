"""What a tune keeps, and says, when no plan is within its tolerance.

The plan closest to the f32 reference (:func:`most_accurate`), and, when the user's own
f32 runtimes fail the check too, the note that the check cannot judge the model on these
inputs (:func:`cannot_judge`); when only peers that stand for no plan are within it, the
note naming such a peer (:func:`no_plan_as_peer`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from autopart.tuning.accuracy import own_runtimes
from autopart.tuning.verify import Measured


def most_accurate(measured: Mapping[str, Measured], pick: str) -> tuple[str, list[str]]:
    """The plan to keep when none is within the tolerance, and the note that says so.

    That is the measured plan of the smallest error (the quickest of equals): the answer
    closest to the f32 reference, never one further from it. Nothing measured: ``pick``.
    """
    finite = {n: m for n, m in measured.items() if math.isfinite(m.max_error)}
    if not finite:
        return pick, []
    kept = min(finite, key=lambda n: (finite[n].max_error, finite[n].median_s))
    result = finite[kept]
    return kept, [
        f"no plan was within the tolerance {result.tolerance:.3g}: kept the most accurate, "
        f"{kept} (error {result.max_error:.2g})"
    ]


def cannot_judge(peer_results: Mapping[str, Measured]) -> list[str]:
    """The note that the check cannot judge the model, when its own f32 runtimes fail it.

    Every peer that runs the model as shipped in f32 (:func:`own_runtimes`) that ran is over
    the tolerance: the user's own runtime disagrees with the f32 reference on these inputs
    (outputs whose size or order follow the data, such as a detector's boxes), so no plan's
    error can say whether it keeps the model's answers.
    """
    own = {name: peer_results[name] for name in own_runtimes() if name in peer_results}
    if not own or any(result.correct for result in own.values()):
        return []
    shown = ", ".join(f"{name} is {result.max_error:.2g} off" for name, result in own.items())
    return [
        f"the check cannot judge this model on these inputs: {shown} the f32 reference "
        "too (outputs whose size or order follow the data?), so no error here says "
        "whether a plan keeps the model's answers"
    ]


def no_plan_as_peer(peer: str, result: Measured, own_plan: str | None) -> str:
    """The note when ``peer``, within the tolerance, stands for no plan that is.

    ``own_plan`` is the plan it stands for, over the tolerance (None: none on these targets).
    """
    why = (
        "no plan on these targets stands for it" if own_plan is None
        else f"its own plan, {own_plan}, is over it"
    )  # fmt: skip
    return (
        f"{peer} is within the tolerance (error {result.max_error:.2g}), but no plan "
        f"measured computes as it does: {why}"
    )
