"""Explaining a plan: a text tree (:mod:`.tree`) and a self-contained HTML page (:mod:`.html`).

Both read two optional fields of :class:`autopart.plan.schema.Plan`, each of which may be
absent or partial (a plan written by hand or by ``autopart run --save-plan`` has neither)::

    plan.predicted = {"objective": "latency" | "makespan", "sequential_s": float,
                      "makespan_s": float, "profile": str,
                      "schedule": [{"step": "p0", "lane": "cpu/*", "start_s": 0.0,
                                    "end_s": 0.0012}, ...],
                      "node_costs": {node: {target: seconds, ...}, ...}}
    plan.measured = {"median_s": float, "runs": int, "schedule": [...same shape...]}

Copies run on lanes named ``copy:SRC->DST``; partitions on ``DEVICE/UNIT`` (``*`` for the
whole device), as :class:`autopart.runtime.plan_executor.StepTiming` names them.
"""

from __future__ import annotations

from autopart.errors import AutopartError


class ReportError(AutopartError):
    """A report cannot be written (for example, its output path is not writable)."""
