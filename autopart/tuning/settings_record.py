"""Every group of tuned values in autopart, gathered for the record ``report.json`` keeps.

Each group lives beside the package that reads it; this module only lists them, by the
name :func:`autopart.settings.settings_in_force` records each under. It imports every
owner, so only the report writer imports it.
"""

from __future__ import annotations

from typing import Any

from autopart.costmodel.calibration import CALIBRATION
from autopart.costmodel.cold import COLD_ENTRY
from autopart.costmodel.fusion import FUSION
from autopart.profile.core_sharing import CORE_SHARING
from autopart.profile.speed import SPEED
from autopart.profile.timing import TIMING
from autopart.search.planner import SEARCH
from autopart.settings import COMMON
from autopart.targets.onnxruntime.settings import ONNXRUNTIME
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
    "onnxruntime": ONNXRUNTIME,
}
"""Every group of tuned values, by the name ``report.json`` records it under."""
