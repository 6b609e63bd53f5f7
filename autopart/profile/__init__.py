"""Profiling: measure per-op, launch and transfer times on every target; keep them per machine.

Pricing the measurements is :mod:`autopart.costmodel`'s job.
"""

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
    "TimingSettings",
    "default_profiles_dir",
    "machine_profile_path",
    "new_profile",
    "open_for_measuring",
]
