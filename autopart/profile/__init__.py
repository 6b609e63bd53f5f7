"""Profiling: measure per-op, launch and transfer times on every target; keep them per machine.

:mod:`~autopart.profile.profiler` runs the jobs that :mod:`~autopart.profile.kinds` plans
and measures (with :mod:`~autopart.profile.samplers` and :mod:`~autopart.profile.timing`)
into a :class:`Profile` (:mod:`~autopart.profile.store`), kept per machine
(:mod:`~autopart.profile.saved`). Pricing the measurements is :mod:`autopart.costmodel`'s job.
"""

from autopart.costmodel.measurements import RowKind
from autopart.profile.profiler import Profiler, ProfileReport
from autopart.profile.saved import (
    default_profiles_dir,
    machine_profile_path,
    new_profile,
    open_for_measuring,
)
from autopart.profile.store import Profile
from autopart.profile.timing import TimingSettings

__all__ = [
    "Profile",
    "ProfileReport",
    "Profiler",
    "RowKind",
    "TimingSettings",
    "default_profiles_dir",
    "machine_profile_path",
    "new_profile",
    "open_for_measuring",
]
