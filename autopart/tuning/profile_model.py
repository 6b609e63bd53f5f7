"""Profiling a model on this machine: ``autopart profile``, and the tune's screen and profile.

:mod:`autopart.api` exposes it (``profile``); it lives here so that the tuning workflow
below the API can use it. Loading is :func:`autopart.loader.load_model`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autopart.io import check_writable
from autopart.ir.graph import Graph
from autopart.profile import (
    Profile,
    Profiler,
    ProfileReport,
    TimingSettings,
    default_profiles_dir,
    machine_profile_path,
    open_for_measuring,
)
from autopart.progress import Progress
from autopart.search.options import check_budget
from autopart.targets.devices import discover
from autopart.targets.resolve import available_targets


def profile_model(
    graph: Graph,
    targets: Sequence[str] | None = None,
    profiles: str | Path | None = None,
    *,
    budget_s: float | None = None,
    progress: Progress | None = None,
    settings: TimingSettings | None = None,
    checkpoint_s: float = 3.0,
    refresh: bool = False,
    screen: bool = False,
) -> tuple[ProfileReport, Profile, Path]:
    """Measure what this machine's saved profile lacks for ``graph``.

    ``targets`` are target specs (default: every target found). Measurements go to
    ``<profiles>/<fingerprint>.csv`` (default: :func:`autopart.profile.default_profiles_dir`),
    checkpointed every ``checkpoint_s`` seconds. With ``refresh`` everything ``graph``
    needs on ``targets`` is measured again and replaces the saved rows; with ``screen`` only
    the first pass of what prices each node is taken (see
    :meth:`~autopart.profile.profiler.Profiler.profile_graph`). Returns the report,
    the profile and its path. The profile file and its lock file are checked writable
    before anything is measured (:func:`autopart.io.check_writable`). An interrupt
    (KeyboardInterrupt) propagates once the measurements so far are saved, noting how many
    rows the profile keeps.
    """
    if budget_s is not None:
        check_budget(budget_s, "budget", allow_zero=True)
    machine = discover()
    chosen = list(targets) if targets else [str(t) for t in available_targets(machine)]
    path = machine_profile_path(profiles or default_profiles_dir(), machine)
    check_writable(path, "profile", lock=True)
    saved = open_for_measuring(path, machine)
    profiler = Profiler(saved, machine, path, settings, checkpoint_s)
    try:
        report = profiler.profile_graph(graph, chosen, budget_s, progress, refresh, screen)
    except KeyboardInterrupt as interrupt:
        note_profile_kept(interrupt, saved, path)
        raise
    return report, saved, path


def note_profile_kept(interrupt: KeyboardInterrupt, profile: Profile, path: Path | None) -> None:
    """Add to ``interrupt`` what the profile saved at ``path`` keeps (its rows), for the CLI."""
    if path is None:
        return
    if path.exists():
        interrupt.add_note(f"kept {len(profile.table)} profile rows in {path}")
    else:
        interrupt.add_note(f"no profile was saved to {path}")
