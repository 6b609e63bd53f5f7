"""Profiling: per-op, launch and transfer costs on every target, kept in per-machine files."""

from autopart.profile.costs import costs_from_profile, profile_targets, transfer_fits
from autopart.profile.profiler import Profiler, ProfileReport
from autopart.profile.saved import (
    default_profiles_dir,
    machine_profile_path,
    new_profile,
    open_for_measuring,
)
from autopart.profile.store import Measurement, Profile, ProfileError
from autopart.profile.timing import TimingSettings

__all__ = [
    "Measurement",
    "Profile",
    "ProfileError",
    "ProfileReport",
    "Profiler",
    "TimingSettings",
    "costs_from_profile",
    "default_profiles_dir",
    "machine_profile_path",
    "new_profile",
    "open_for_measuring",
    "profile_targets",
    "transfer_fits",
]
