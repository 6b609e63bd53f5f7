"""Every group of tuned values in autopart, gathered for the record ``report.json`` keeps.

Each group lives beside the package that reads it; this module only lists them, by the
name :func:`autopart.settings.settings_in_force` records each under, and asks every
registered codegen for its own (:meth:`~autopart.targets.codegen.Codegen.settings`). It
imports every owner, so only the report writer imports it.
"""

from __future__ import annotations

from typing import Any

from autopart.costmodel.calibration import CALIBRATION
from autopart.costmodel.cold import COLD_ENTRY
from autopart.costmodel.fusion import FUSION
from autopart.profile.core_sharing import CORE_SHARING
from autopart.profile.samplers import COMPILED_CACHE
from autopart.profile.speed import SPEED
from autopart.profile.timing import TIMING
from autopart.profile.values import VALUES
from autopart.search.planner import SEARCH
from autopart.settings import COMMON
from autopart.targets.registry import registered_codegens
from autopart.tuning.settings import ACCURACY, SCREEN, VERIFY

SETTINGS_GROUPS: dict[str, Any] = {
    "accuracy": ACCURACY,
    "timing": TIMING,
    "cold_entry": COLD_ENTRY,
    "calibration": CALIBRATION,
    "fusion": FUSION,
    "verify": VERIFY,
    "search": SEARCH,
    "screen": SCREEN,
    "speed": SPEED,
    "common": COMMON,
    "core_sharing": CORE_SHARING,
    "compiled_cache": COMPILED_CACHE,
    "reference_values": VALUES,
}
"""The groups of tuned values outside the codegens, by the name ``report.json`` records."""


def settings_groups() -> dict[str, Any]:
    """Every group of tuned values: :data:`SETTINGS_GROUPS`, then each codegen's."""
    groups = dict(SETTINGS_GROUPS)
    for codegen in registered_codegens():
        groups.update(codegen.settings())
    return groups
