"""What every command shares: the console, tables, option parsing and the error wrapper.

Errors a user can cause are printed as one line on stderr with exit status 2.

Names in models and plans are the user's text, shown as they are: the console parses no
markup in them (``[bold]`` in a node name prints as written) and shows control characters
(an ESC or OSC sequence, a bidi override) as visible escapes instead of sending them to the
terminal. Styling is applied with :func:`styled`, never by markup in a string.
"""

from __future__ import annotations

import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import wraps
from typing import Any

import click
from rich.console import Console
from rich.progress import Progress, ProgressColumn, TaskID
from rich.table import Table
from rich.text import Text

from autopart.errors import AutopartError
from autopart.host_memory import peak_memory_bytes
from autopart.interrupts import exit_status, interrupted_line, interruptible
from autopart.search.constraints import parse_bytes


def visible(text: str) -> str:
    """``text`` with every control or format character written as a Python escape."""
    if text.isprintable():
        return text
    return "".join(
        char
        if char == " " or unicodedata.category(char) not in ("Cc", "Cf", "Zl", "Zp")
        else char.encode("unicode_escape").decode("ascii")
        for char in text
    )


def one_line(message: str) -> str:
    """``message`` on one line, every control character in it made visible."""
    return visible(message)


class SafeConsole(Console):
    """A rich console that shows every string it is given literally (see the module doc)."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        """Render ``text`` with no markup, its control characters made visible."""
        kwargs["markup"] = False
        return super().render_str(visible(text), **kwargs)


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line of text from plain parts and (text, style) pairs, each shown literally."""
    return Text.assemble(
        *(visible(part) if isinstance(part, str) else (visible(part[0]), part[1]) for part in parts)
    )


console = SafeConsole(highlight=False, markup=False)
PIPED_MAX_WIDTH = 200  # a table printed to a pipe or log gets up to this many columns


_DOING = ["starting"]  # what the command does now, for the memory watch's line


def doing(stage: str, label: str) -> None:
    """Record what the command does now (a progress update): an out-of-memory stop names it."""
    _DOING[0] = f"{stage}: {label}" if label else stage


COMMAND_STARTED = "started"  # the key of the launcher's start in the context's obj


def command_started() -> float | None:
    """When the ``autopart`` process began (:func:`time.perf_counter`), as the launcher says.

    None when the command runs otherwise (a test's runner, another program): then a
    budget counts from the tune's own start.
    """
    context = click.get_current_context(silent=True)
    found = context.find_root().obj if context is not None else None
    started = found.get(COMMAND_STARTED) if isinstance(found, dict) else None
    return started if isinstance(started, float) else None


def now_doing() -> str:
    """What the command does now, as :func:`doing` last recorded it."""
    return _DOING[0]


def user_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a command: an :class:`AutopartError` is one ``error:`` line and exit status 2.

    SIGINT and SIGTERM stop it at the next safe point (:func:`autopart.interrupts.interruptible`):
    one ``interrupted:`` line says what the work kept, and the exit status is 130 or 143.
    """

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with interruptible():
            try:
                return command(*args, **kwargs)
            except AutopartError as error:
                click.echo(f"error: {one_line(str(error))}", err=True)
                sys.exit(2)
            except MemoryError as error:  # the last guard: the size checks should come first
                detail = one_line(str(error)) or "no detail"
                click.echo(f"error: out of memory: {detail}", err=True)
                sys.exit(2)
            except KeyboardInterrupt as interrupt:
                click.echo(one_line(interrupted_line(interrupt)), err=True)
                sys.exit(exit_status(interrupt))

    return wrapper


@contextmanager
def telling_interrupts(kept: list[str]) -> Iterator[None]:
    """Within, an interrupt (KeyboardInterrupt) is told what the command has kept so far.

    The command appends a sentence to ``kept`` after each file it writes; an interrupt
    gets each as a note (for the ``interrupted:`` line, :func:`user_errors`).
    """
    try:
        yield
    except KeyboardInterrupt as interrupt:
        for sentence in kept:
            interrupt.add_note(sentence)
        raise


def parse_input_shapes(specs: Sequence[str]) -> dict[str, list[int]]:
    """Parse ``--input-shape NAME=D1,D2,...`` options into a name -> dims mapping.

    NAME is an input (its full shape) or a symbolic dim (one size): import tells them apart
    (:func:`autopart.ir.input_shapes.resolve_input_shapes`).
    """
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            pieces = dims.split(",") if dims.strip() else []  # "x=" is a scalar's shape
            shapes[name] = [int(piece) for piece in pieces]  # "1,,4" has an empty dim: refused
            if any(d < 0 for d in shapes[name]):
                raise ValueError
        except ValueError:
            raise click.BadParameter(
                f"{spec!r} is not INPUT=D1,D2,... or DIM=N with dims >= 0",
                param_hint="--input-shape",
            ) from None
    return shapes


input_shape_option = click.option(
    "--input-shape",
    "input_shapes",
    multiple=True,
    metavar="INPUT=D1,D2,...|DIM=N",
    help="fix an input's shape, or a named symbolic dim in every input (unfixed dims are 1)",
)


def parse_freeze(specs: Sequence[str]) -> dict[str, object]:
    """Parse ``--freeze NAME=VALUE`` options: a number, or numbers separated by commas.

    A value with a comma is a list (``x=1,2``; ``x=5,`` is a one-item list); ``true`` and
    ``false`` are booleans. Import casts each to its input's declared dtype.
    """
    frozen: dict[str, object] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        try:
            if not sep or not name or not text.strip():
                raise ValueError
            items = [_number(item) for item in text.split(",") if item.strip()]
            frozen[name] = items if "," in text else items[0]
        except ValueError:
            raise click.BadParameter(
                f"{spec!r} is not NAME=VALUE (a number, or numbers separated by commas)",
                param_hint="--freeze",
            ) from None
    return frozen


def _number(text: str) -> bool | int | float:
    word = text.strip().lower()
    if word in ("true", "false"):
        return word == "true"
    try:
        return int(word)
    except ValueError:
        return float(word)


freeze_option = click.option(
    "--freeze",
    "freeze",
    multiple=True,
    metavar="INPUT=VALUE",
    help="fix an input to a value (a number or a comma list, in its dtype) and fold what follows",
)


precision_option = click.option(
    "--precision",
    default="auto",
    show_default=True,
    metavar="auto|f32|f32,bf16,int8",
    help="precisions the plan may compute in: every one this machine offers, or those named",
)
tolerance_option = click.option(
    "--tolerance",
    default=None,
    metavar="REL|Nx",
    help="largest relative error of any output against f32, or a multiple of OpenVINO as "
    "installed's own error on the same inputs (0.5x: half of it; default: 1.1x; with "
    "--precision f32, 1e-3)",
)


_TASK_OPTIONS = (
    click.option(
        "--inputs", "dataset", type=click.Path(exists=True), default=None,
        help="your samples: an .npz with a leading sample axis, or a folder of .npz files; "
        "split into samples int8 is calibrated on and samples plans are judged on "
        "(default: seeded random inputs, a stand-in)",
    ),
    click.option(
        "--validation-split", type=float, default=0.5, show_default=True,
        help="the share of --inputs the plans are judged on (the rest calibrate int8)",
    ),
    click.option(
        "--metric", default=None, metavar="agreement|topk:K|cosine|snr-db|max-rel",
        help="how far outputs may move from f32: answers changed (argmax of the scores), "
        "answers out of the top K, cosine, SNR or the largest relative error (default: "
        "agreement where --inputs are given and every output is scores, else max-rel)",
    ),
    click.option(
        "--max-drop", type=float, default=None, metavar="D",
        help="the largest drop in the metric allowed (default: 0.01 of the answers for "
        "agreement and topk, 1e-3 for cosine and snr-db, i.e. 30 dB; for max-rel, "
        "--tolerance's default)",
    ),
)  # fmt: skip


def task_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--inputs``, ``--validation-split``, ``--metric`` and ``--max-drop`` to ``command``.

    The command receives them as one ``task`` keyword: the fields of
    :class:`~autopart.tuning.options.ModelOptions` they set, by name.
    """

    @wraps(command)
    def gathered(
        *args: Any,
        dataset: str | None,
        validation_split: float,
        metric: str | None,
        max_drop: float | None,
        **kwargs: Any,
    ) -> Any:
        task = {"dataset": dataset, "validation_split": validation_split}
        task |= {"metric": metric, "max_drop": max_drop}
        return command(*args, task=task, **kwargs)

    for option in reversed(_TASK_OPTIONS):
        gathered = option(gathered)
    return gathered


def parse_memory_limit(value: str | None) -> int | None:
    """``--memory-limit``'s size in bytes (None: not given).

    A malformed size raises :class:`~autopart.errors.AutopartError` (an ``error:`` line).
    """
    return None if value is None else parse_bytes(value)


memory_limit_option = click.option(
    "--memory-limit",
    default=None,
    metavar="SIZE",
    help="hold the command to this much resident memory, e.g. 1.5GB: a plan that would "
    "pass it is not compiled (default: what the machine has free)",
)


def print_table(table: Table) -> None:
    """Print ``table`` to the console, never cutting its columns only because of a pipe.

    On a terminal rich fits the table to the terminal's width. Elsewhere (a pipe, a log,
    CI) it would assume 80 columns and wrap every cell; there the table gets its natural
    width, up to :data:`PIPED_MAX_WIDTH`.
    """
    if console.is_terminal:
        console.print(table)
        return
    natural = console.measure(table, options=console.options.update_width(PIPED_MAX_WIDTH))
    wide = SafeConsole(
        file=console.file, width=max(console.width, natural.maximum), highlight=False, markup=False
    )
    wide.print(table)


def split_list(values: Sequence[str]) -> list[str]:
    """Repeated and comma-separated option values as one list: ``("a,b", "c")`` -> a, b, c."""
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


class StageLog:
    """Progress for output that is not a terminal (a CI log, ``| tee``): plain lines on stderr.

    One line when a stage that took :attr:`quiet_below_s` or more ends (its steps done, of
    how many, and the seconds it took), and one every :attr:`heartbeat_s` seconds within a
    long stage, updates or none (a heartbeat thread), so that a log shows where the time
    goes; a stage cut short by an error
    leaves the error's line alone. A task's stage is its ``stage`` field, else the first
    word of its description. It takes the calls a rich ``Progress`` takes.
    """

    heartbeat_s = 30.0
    quiet_below_s = 0.5  # quicker stages (a reused profile) print nothing

    def __init__(self) -> None:
        self._stage: str | None = None
        self._started = self._last_line = 0.0
        self._done, self._total, self._label = 0, 0, ""
        self._stages: dict[TaskID, str] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()

    def __enter__(self) -> StageLog:
        threading.Thread(target=self._beat, name="stage-log", daemon=True).start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self._stopped.set()
        with self._lock:
            if kind is None:
                self._close()

    def _beat(self) -> None:
        """The heartbeat between updates: a stage that hears nothing still prints its line.

        A stage spent in one long call (a library compiling a whole model) sends no update;
        without this the log would fall silent for as long. A heartbeat of 0 beats on
        updates only.
        """
        while not self._stopped.wait(1.0):
            with self._lock:
                now = time.perf_counter()
                quiet = now - self._last_line >= self.heartbeat_s > 0
                if self._stage is not None and quiet:
                    self._last_line = now
                    self._line(
                        f"{self._counts()}, {now - self._started:.0f} s so far: {self._label}"
                    )

    def add_task(self, description: str, **fields: Any) -> TaskID:
        """Start tracking a task; its stage is ``fields["stage"]`` or its first word."""
        task = TaskID(len(self._stages))
        self._stages[task] = str(fields.get("stage") or description.split(" ")[0])
        return task

    def update(self, task: TaskID, **fields: Any) -> None:
        """Take a task's new counts; print a line when its stage changes or time has passed."""
        with self._lock:
            self._update(task, fields)

    def _update(self, task: TaskID, fields: dict[str, Any]) -> None:
        stage = str(fields.get("stage") or self._stages.get(task, ""))
        now = time.perf_counter()
        if stage != self._stage:
            self._close()
            self._stage, self._started, self._last_line = stage, now, now
            self._done, self._total = 0, 0
        if fields.get("completed") is not None:
            self._done = int(fields["completed"])
        if fields.get("total"):
            self._total = int(fields["total"])
        self._label = str(fields.get("description") or self._label)
        if now - self._last_line >= self.heartbeat_s:
            self._last_line = now
            self._line(f"{self._counts()}, {now - self._started:.0f} s so far: {self._label}")

    def _counts(self) -> str:
        return f"{self._done}/{self._total} steps" if self._total else f"{self._done} steps"

    def _close(self) -> None:
        took = time.perf_counter() - self._started
        if self._stage is not None and took >= self.quiet_below_s:
            self._line(f"{self._counts()} in {took:.1f} s")
        self._stage = None

    def _line(self, text: str) -> None:
        click.echo(one_line(f"{self._stage}: {text}"), err=True)


def progress_display(*columns: str | ProgressColumn) -> Progress | StageLog:
    """Progress bars on a terminal that vanish when done; a line per stage in a pipe or log."""
    if console.is_terminal:
        return Progress(*columns, console=console, transient=True)
    return StageLog()


def print_peak_memory() -> None:
    """One line: the most memory the command has held so far (resident, in GiB)."""
    peak = peak_memory_bytes()
    if peak:
        console.print(f"peak memory: {peak / 2**30:.2f} GiB resident")
