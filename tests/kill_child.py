"""The child processes of the kill suite: the real command line, SIGKILLed when asked.

A child runs ``autopart`` in a fresh interpreter (``python -c CHILD profile ...`` or
``tune ...``). The only change :data:`CHILD` makes is a checkpoint after every profiling
step instead of every 3 s, so that kills find many states of the profile file. It prints
:data:`READY` once its imports are done; kill moments are counted from there. A kill comes
at a moment (:func:`kill_after`), or inside the write of a file (:func:`kill_in_write`).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READY = "kill-harness: ready"
CHILD = """
import os, sys
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")  # as the launcher does
from autopart.profile.profiler import Profiler
_init = Profiler.__init__
def _every_step(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.checkpoint_s = 0.0
Profiler.__init__ = _every_step
STALL
import autopart.cli
from autopart.launcher import main
sys.stderr.write("READY\\n")
sys.stderr.flush()
main()
""".replace("READY", READY)
STALL = """
import time
_fdopen = os.fdopen
_seen = [0]
class _Stalled:
    def __init__(self, handle, path):
        self.handle, self.path = handle, path
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.handle.close()
    def write(self, data):
        self.handle.write(data[: len(data) // 2])
        self.handle.flush()
        os.fsync(self.handle.fileno())
        with open(MARKER + ".part", "w") as marker:
            marker.write(self.path)
        os.rename(MARKER + ".part", MARKER)
        time.sleep(3600)
def _watching(fd, *args, **kwargs):
    handle = _fdopen(fd, *args, **kwargs)
    path = os.readlink(f"/proc/self/fd/{fd}")
    name = os.path.basename(path)
    if name.startswith(PREFIX) and name.endswith(".tmp"):
        _seen[0] += 1
        if _seen[0] == NTH:
            return _Stalled(handle, path)
    return handle
os.fdopen = _watching
"""
"""Child code that stalls inside the ``NTH`` write of a file whose temporary files start
with ``PREFIX``, after writing half of it, once it has written its path to ``MARKER``."""


@dataclass
class Ended:
    """How a child ended: SIGKILLed ``after_s`` after it was ready, or on its own then."""

    killed: bool
    after_s: float
    code: int
    stderr: str

    def problems(self) -> list[str]:
        """A traceback, or an end on its own that was not a success."""
        found = ["the child printed a traceback"] if "Traceback" in self.stderr else []
        if not self.killed and self.code != 0:
            found.append(f"the child ended with status {self.code}: {self.stderr[-300:]!r}")
        return found


def launch(args: Sequence[str], stall: str = "") -> tuple[subprocess.Popen[str], float]:
    """Start the command line with ``args``; return it and the moment it was ready."""
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD.replace("STALL\n", stall), *args],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stderr is not None
    early: list[str] = []
    while (line := process.stderr.readline()).strip() != READY:
        if not line:
            raise AssertionError(f"the child ended before it was ready: {''.join(early)}")
        early.append(line)
    return process, time.monotonic()


def _ended(process: subprocess.Popen[str], ready: float, killed_at: float | None) -> Ended:
    _, stderr = process.communicate(timeout=300)
    moment = killed_at if killed_at is not None else time.monotonic()
    killed = killed_at is not None and process.returncode == -signal.SIGKILL
    return Ended(killed, moment - ready, process.returncode, stderr)


@dataclass(frozen=True)
class Clean:
    """A run to its end, timed from ready: in all, and while it wrote the file it watched
    (from when the file first appeared to its last change)."""

    duration_s: float
    first_write_s: float
    last_write_s: float


def run_clean(args: Sequence[str], watch: Path) -> Clean:
    """Run the command line to its end, watching the file ``watch`` it writes."""
    process, ready = launch(args)
    wall_at_ready = time.time() - (time.monotonic() - ready)
    first = None
    while process.poll() is None:
        if first is None and watch.exists():
            first = time.monotonic() - ready
        time.sleep(0.01)
    ended = _ended(process, ready, None)
    assert ended.code == 0 and not ended.problems(), ended.stderr
    last = watch.stat().st_mtime - wall_at_ready
    return Clean(ended.after_s, ended.after_s if first is None else first, last)


def kill_after(args: Sequence[str], delay_s: float) -> Ended:
    """Run the command line and SIGKILL it ``delay_s`` after it is ready (if still running)."""
    process, ready = launch(args)
    try:
        process.wait(timeout=delay_s)
        return _ended(process, ready, None)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        return _ended(process, ready, time.monotonic())


@dataclass
class InWrite:
    """A kill inside a write: what the file held while it was under way, the temp file."""

    ended: Ended
    before: bytes | None = None
    temporary: Path | None = None


def kill_in_write(args: Sequence[str], target: Path, nth: int, marker: Path) -> InWrite:
    """Run the command line and SIGKILL it inside its ``nth`` write of ``target``.

    ``before`` is what ``target`` held then (None: absent); if the child ends before that
    write, it is not killed.
    """
    stall = f"MARKER, PREFIX, NTH = {str(marker)!r}, {f'.{target.name}.'!r}, {nth}\n{STALL}"
    process, ready = launch(args, stall)
    deadline = time.monotonic() + 300
    while not marker.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            return InWrite(_ended(process, ready, None))
        time.sleep(0.01)
    before = target.read_bytes() if target.exists() else None
    process.send_signal(signal.SIGKILL)
    ended = _ended(process, ready, time.monotonic())
    return InWrite(ended, before, Path(marker.read_text()))
