"""SIGINT and SIGTERM: one line saying what was kept, exit status 130 or 143, saves intact.

Real processes (``python -m autopart``) are signalled once the stage under test has begun:
the stage log prints a line as each stage ends (every stage, here), a profile's first
checkpoint appears on disk, a study's trials appear in its database.
"""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest

from autopart import api
from autopart.interrupts import FORCED_EXIT_LINE
from autopart.profile import Profile, machine_profile_path
from autopart.targets.devices import discover
from tests.test_profile import FAST, tiny_cnn
from tests.test_write_failures import the_line

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
TARGETS = "cpu@numpy,cpu/0@onnxruntime"
# compiles per op: a profile long past the first checkpoint (3 s) even on a fast machine
SLOW_TARGETS = f"{TARGETS},cpu/0@openvino"
# the command line with every stage's end logged, however quick (StageLog prints those
# that took 0.5 s or more): "peers: ..." means verify has begun
LOUD = (
    "from autopart.cli.common import StageLog; StageLog.quiet_below_s = 0.0; "
    "from autopart.launcher import main; main()"
)
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


@dataclass(frozen=True)
class Tuned:
    """A tiny model, its profile and a search folder holding a saved plan."""

    model: Path
    profiles: Path
    search: Path

    def tune(self, *extra: str, search: Path | None = None) -> list[str]:
        return [
            "tune", str(self.model), "--targets", TARGETS, "--profiles", str(self.profiles),
            "--search-dir", str(search or self.search), *extra,
        ]  # fmt: skip

    def saved(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in self.search.glob("*/*.json")}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Tuned:
    root = tmp_path_factory.mktemp("tuned")
    model = root / "tiny.onnx"
    onnx.save(tiny_cnn(), str(model))
    api.profile(str(model), TARGETS.split(","), root / "profiles", settings=FAST)
    world = Tuned(model, root / "profiles", root / "search")
    done = subprocess.run(
        [sys.executable, "-m", "autopart", *world.tune("--rounds", "2", "--no-peers")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert {"plan.json", "report.json"} <= set(world.saved())
    return world


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", LOUD, *args],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def wait_for_line(process: subprocess.Popen[str], prefix: str) -> list[str]:
    """Read ``process``'s stderr until a line starting with ``prefix``; the lines read."""
    assert process.stderr is not None
    lines: list[str] = []
    while not lines or not lines[-1].startswith(prefix):
        line = process.stderr.readline()
        assert line, f"ended before {prefix!r}: {''.join(lines)}"
        lines.append(line)
    return lines


def wait_until(process: subprocess.Popen[str], ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 120
    while not ready():
        assert process.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.05)


def finish(process: subprocess.Popen[str], before: list[str] | None = None) -> tuple[int, str]:
    """The exit status and the whole stderr of ``process`` once it ends."""
    _, rest = process.communicate(timeout=120)
    return process.returncode, "".join(before or []) + rest


@pytest.mark.slow
@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_an_interrupted_verify_saves_no_plan_and_says_so(
    tuned: Tuned, first: signal.Signals
) -> None:
    before = tuned.saved()
    process = start(*tuned.tune("--rounds", "40"))
    lines = wait_for_line(process, "peers:")  # verify has begun
    time.sleep(0.5)
    process.send_signal(first)
    time.sleep(0.3)  # a second signal while the first one's cleanup runs
    process.send_signal(signal.SIGINT)
    code, stderr = finish(process, lines)
    assert code == STATUS[first], stderr
    (plan,) = tuned.search.glob("*/plan.json")
    line = the_line(stderr, "interrupted: ")
    assert line == f"interrupted: the saved plan {plan} was left as it was"
    assert tuned.saved() == before


def test_an_interrupted_search_keeps_its_trials_and_the_plan(tuned: Tuned, tmp_path: Path) -> None:
    search = tmp_path / "search"
    shutil.copytree(tuned.search, search)
    (plan,) = search.glob("*/plan.json")
    before = plan.read_bytes()
    database = plan.parent / "study.db"

    def finished() -> int:
        if not database.exists():
            return 0
        try:
            with sqlite3.connect(database) as connection:
                query = "SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'"
                return int(connection.execute(query).fetchone()[0])
        except sqlite3.OperationalError:  # the tables are not made yet
            return 0

    process = start(*tuned.tune("--objective", "makespan", "--budget", "600", search=search))
    wait_until(process, lambda: finished() >= 3)
    process.send_signal(signal.SIGINT)
    code, stderr = finish(process)
    assert code == 130, stderr
    line = the_line(stderr, "interrupted: ")
    assert f"kept {finished()} finished trials in study database {database}" in line
    assert line.endswith(f"the saved plan {plan} was left as it was")
    assert plan.read_bytes() == before


@pytest.mark.slow
def test_an_interrupted_profile_keeps_its_rows_and_says_how_many(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    path = machine_profile_path(profiles, discover())
    process = start(
        "profile", str(FIXTURES / "efficientnet_b0.onnx"), "--targets", SLOW_TARGETS,
        "--profiles", str(profiles),
    )  # fmt: skip
    wait_until(process, path.exists)  # the first checkpoint
    process.send_signal(signal.SIGINT)
    code, stderr = finish(process)
    assert code == 130, stderr
    kept = len(Profile.load(path).table)
    assert the_line(stderr, "interrupted: ") == f"interrupted: kept {kept} profile rows in {path}"
    assert not list(profiles.glob(".*.tmp"))


def test_a_third_signal_ends_the_process_at_once(tuned: Tuned) -> None:
    from autopart.interrupts import _taken

    _taken.count = 0
    with pytest.raises(KeyboardInterrupt):
        _taken.handle(signal.SIGINT, None)
    _taken.handle(signal.SIGINT, None)  # held: returns
    assert _taken.count == 2
    # the third calls os._exit: shown in a child, which it ends with the first one's status
    script = (
        "import os, signal, time\n"
        "from autopart.interrupts import run_interruptible\n"
        "def work():\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(5)\n"
        "    finally:\n"
        "        for _ in range(2):\n"
        "            time.sleep(0.2)  # a user's signals come apart, in order\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        while True: pass\n"
        "run_interruptible(work)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 143 and done.stderr == FORCED_EXIT_LINE + "\n"


def test_a_storage_failure_after_an_interrupt_is_the_interrupt() -> None:
    """SQLAlchemy refuses a session the interrupt cut short: that is no damaged database."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        pytest.skip("started ignoring SIGINT (a background job): interruptible leaves it so")
    import sqlalchemy.exc

    from autopart.interrupts import interruptible
    from autopart.search.optuna_study import StudyStorageError, storage_errors

    failure = sqlalchemy.exc.InvalidRequestError("this identity map is no longer valid")
    with pytest.raises(StudyStorageError, match="is damaged"), storage_errors("study"):
        raise failure  # no interrupt: a damaged database, as before
    with interruptible():
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        with pytest.raises(KeyboardInterrupt), storage_errors("study"):
            raise failure
