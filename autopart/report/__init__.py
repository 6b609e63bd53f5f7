"""Explaining a plan: a text tree (:mod:`.tree`) and a self-contained HTML page (:mod:`.html`).

Both read two optional fields of :class:`autopart.plan.schema.Plan`: ``plan.predicted``, a
:class:`autopart.plan.schema.Prediction`, and ``plan.measured``, a
:class:`autopart.plan.schema.MeasuredRun`. Either may be absent or partial (a plan written
by hand or by ``autopart run --save-plan`` has neither); what is missing is said so.

Copies run on lanes named ``copy:SRC->DST``; partitions on ``DEVICE/UNIT`` (``*`` for the
whole device), as :class:`autopart.runtime.plan_executor.StepTiming` names them.
"""

from __future__ import annotations

from autopart.errors import AutopartError


class ReportError(AutopartError):
    """A report cannot be written (for example, its output path is not writable)."""
