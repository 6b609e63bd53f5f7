"""SIGINT and SIGTERM as one interrupt: raised once, then held while the work cleans up.

Python raises :class:`KeyboardInterrupt` for SIGINT; :func:`interruptible` makes SIGTERM
raise :class:`Terminated` (a KeyboardInterrupt) the same way, so that every ``except
KeyboardInterrupt`` and ``finally`` that saves finished work (a profile's rows, a study's
trials) runs for both. Only the first signal raises: while the interrupt unwinds and the
work saves what it finished, later signals are held, so that they cannot cut a save short
or the line that says what was kept. A third signal (the user insisting) ends the process
at once with :data:`FORCED_EXIT_LINE`.

Each layer that keeps something adds a note to the interrupt on its way out
(``interrupt.add_note("kept 352 profile rows in ...")``); :func:`interrupted_line` joins
them into the one line the command line prints.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
FORCED_AFTER = 3  # the signal that ends the process without waiting for the cleanup
FORCED_EXIT_LINE = "interrupted again: stopped before the cleanup ended (saves may be missing)"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Python raises KeyboardInterrupt for SIGINT."""


def exit_status(interrupt: BaseException) -> int:
    """The shell's status for a process ended by the interrupt's signal: 128 + its number."""
    signum = signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT
    return 128 + int(signum)


def interrupted_line(interrupt: BaseException, nothing: str = "nothing was saved") -> str:
    """The one line that says an interrupt stopped the work, and what the work kept.

    The notes the layers added to ``interrupt``, joined by ``;`` (``nothing`` without any).
    """
    notes = [" ".join(str(note).split()) for note in getattr(interrupt, "__notes__", [])]
    return "interrupted: " + ("; ".join(note for note in notes if note) or nothing)


class _Signals:
    """The signals taken so far by :func:`interruptible`'s handler (one per process)."""

    def __init__(self) -> None:
        self.count = 0
        self.first = 0

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """Raise for the first signal, hold the next, end the process on the third."""
        self.count += 1
        if self.count == 1:
            self.first = signum
            raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        if self.count >= FORCED_AFTER:
            os.write(2, f"{FORCED_EXIT_LINE}\n".encode())
            os._exit(128 + self.first)  # the status the first signal asked for


_taken = _Signals()


def interrupt_taken() -> KeyboardInterrupt | None:
    """A fresh interrupt of the kind first taken since the handler was installed, else None.

    For code that turns a library's failure into an error: a failure that follows an
    interrupt (a database session the interrupt cut short) is the interrupt, not an error.
    """
    if not _taken.count or not installed():
        return None
    return Terminated() if _taken.first == signal.SIGTERM else KeyboardInterrupt()


def installed() -> bool:
    """Whether :func:`interruptible`'s handler takes SIGINT or SIGTERM now."""
    return any(signal.getsignal(signum) == _taken.handle for signum in SIGNALS)


def _install() -> dict[signal.Signals, Any]:
    """Take SIGINT and SIGTERM (those not ignored); return the handlers they had."""
    _taken.count = 0
    previous: dict[signal.Signals, Any] = {}
    for signum in SIGNALS:
        if signal.getsignal(signum) != signal.SIG_IGN:
            previous[signum] = signal.signal(signum, _taken.handle)
    return previous


@contextmanager
def interruptible() -> Iterator[None]:
    """Within, SIGINT and SIGTERM raise once and are then held (see the module docstring).

    Only in the main thread (elsewhere Python cannot take signals), and a signal the
    process was started ignoring (``nohup``, a background job) stays ignored. Nested uses
    share the outer one; the outermost restores the handlers it found.
    """
    if installed() or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = _install()
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _hand_to_main() -> None:
    """Take SIGINT and SIGTERM in a thread of their own and raise them in the main thread.

    A signal delivered to the process lands in whichever thread runs, in the middle of a
    library's call: on an Intel Xeon with AMX, a Ctrl-C during the race's OpenVINO and
    onnxruntime runs ended the process by SIGSEGV. Blocked here, before any library
    starts a thread (every thread inherits the mask), the signals reach only a watcher
    waiting for them (``sigwait``), which hands each to the main thread's Python handler
    (``_thread.interrupt_main``): it runs between two bytecodes, never inside a library.
    The watcher ends the process itself on the :data:`FORCED_AFTER`-th signal, as the
    handler would, for the main thread may be inside a long call then. Signals the process
    was started ignoring stay ignored.
    """
    wanted = {signum for signum in SIGNALS if signal.getsignal(signum) != signal.SIG_IGN}
    if not wanted or not hasattr(signal, "pthread_sigmask"):
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, wanted)

    def watch() -> None:
        received: list[int] = []
        while True:
            received.append(signal.sigwait(wanted))
            if len(received) >= FORCED_AFTER:
                os.write(2, f"{FORCED_EXIT_LINE}\n".encode())
                os._exit(128 + received[0])
            _thread.interrupt_main(received[-1])

    threading.Thread(target=watch, name="autopart-signals", daemon=True).start()


def run_interruptible(main: Callable[[], object], nothing: str = "nothing was saved") -> None:
    """Run ``main`` with signals taken for good; an interrupt it lets out is one line.

    For a process's outermost frame (the console script), where an interrupt that arrives
    before the command's own handling (while modules load) would otherwise print a
    traceback, or with SIGTERM end the process without a word. Once interrupted, the
    process ends at once with status 130 or 143: Python's own shutdown would give the
    signals back to the system, and a second Ctrl-C in it would end the process by the
    signal instead.
    """
    _install()  # for good: restoring them as the process ends would open a gap
    _hand_to_main()
    try:
        main()
    except KeyboardInterrupt as interrupt:
        sys.stderr.write(interrupted_line(interrupt, nothing) + "\n")
        status = exit_status(interrupt)
    except SystemExit as leaving:
        if not _taken.count:
            raise
        status = leaving.code if isinstance(leaving.code, int) else 1
    else:
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)
