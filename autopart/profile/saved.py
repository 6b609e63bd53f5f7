"""Where profiles live: ``<profiles dir>/<machine fingerprint>.csv``, one file per machine.

A store directory may hold profiles of many machines; each file's header names the machine
it was taken on. Measuring on this machine only ever adds to this machine's file. A file of
another machine is only read for planning (``--profile FILE``), never measured into.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path

from autopart.errors import ProfileError
from autopart.io import leftovers, locked, remove_leftovers
from autopart.profile.store import Profile, now
from autopart.targets.devices import Machine
from autopart.targets.registry import codegen_libraries

DEFAULT_DIR = "profiles"
_VERSIONED = ("autopart", "onnx", "scipy")  # besides each codegen's library


def default_profiles_dir() -> Path:
    """``$AUTOPART_PROFILES`` when set, else ``profiles/`` in the working directory."""
    return Path(os.environ.get("AUTOPART_PROFILES", DEFAULT_DIR))


def machine_profile_path(directory: str | Path, machine: Machine) -> Path:
    """The file that holds ``machine``'s profile in ``directory``."""
    return Path(directory) / f"{machine.fingerprint()}.csv"


def library_versions() -> dict[str, str]:
    """Versions of Python and of the libraries whose speed the measurements depend on.

    Those are autopart's own and every registered codegen's library
    (:attr:`~autopart.targets.codegen.Codegen.library`), where installed.
    """
    versions = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    versions.update(codegen_libraries())
    return versions


def new_profile(machine: Machine) -> Profile:
    """An empty profile of ``machine``: its fingerprint, devices, date and library versions."""
    return Profile(
        {
            "fingerprint": machine.fingerprint(),
            "machine": {name: device.describe() for name, device in machine.devices.items()},
            "created": now(),
            "versions": library_versions(),
        }
    )


def open_for_measuring(path: str | Path, machine: Machine) -> Profile:
    """The profile at ``path`` to add ``machine``'s measurements to (new when absent).

    Raises :class:`ProfileError` when the file is unreadable or belongs to another machine;
    the file is left untouched either way. Temporary files that saves killed midway left
    beside it are removed (:func:`autopart.io.remove_leftovers`).
    """
    path = Path(path)
    if leftovers(path):  # of saves killed midway, which no later save might remove
        with locked(path):
            remove_leftovers(path)
    if not path.exists():
        return new_profile(machine)
    profile = Profile.load(path)
    check_same_machine(profile, machine, path)
    return profile


def check_same_machine(profile: Profile, machine: Machine, path: str | Path) -> None:
    """Raise :class:`ProfileError` unless ``profile`` was taken on ``machine``."""
    if profile.fingerprint != machine.fingerprint():
        raise ProfileError(
            f"profile {path} was taken on machine {profile.fingerprint}, not on this one "
            f"({machine.fingerprint()}); pass it with --profile to plan for that machine"
        )
