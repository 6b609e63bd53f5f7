"""Every write that fails, and every damaged study, is one ``error:`` line and exit status 2.

Failures are injected at the one place autopart writes files
(:func:`autopart.io.atomic_write_bytes`): a full disk by handing the write a descriptor of
``/dev/full`` (the kernel's own ENOSPC), a permission error by refusing the temporary file
(EACCES). A small file system is filled for real where the machine lets a test mount one.
Study databases are damaged with SQLite itself.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from autopart import api
from autopart.cli import main
from autopart.io import atomic_write_bytes, check_writable
from autopart.profile import machine_profile_path
from autopart.targets.devices import discover
from tests.test_errors import tiny_model
from tests.test_profile import FAST, tiny_cnn
from tests.test_tune import _foreign_copy

TARGETS = "cpu@numpy,cpu/0@onnxruntime"
ROOT = Path(__file__).resolve().parents[1]
FAILURES = {  # injected failure -> the words the one line must carry
    errno.ENOSPC: os.strerror(errno.ENOSPC),
    errno.EACCES: os.strerror(errno.EACCES),
}


@dataclass(frozen=True)
class World:
    """A tiny model, this machine's profile of it, another machine's, and a saved plan."""

    root: Path
    model: Path
    profiles: Path
    foreign: Path
    plan: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("world")
    model = root / "tiny.onnx"
    onnx.save(tiny_cnn(), str(model))
    profiles = root / "profiles"
    api.profile(str(model), TARGETS.split(","), profiles, settings=FAST)
    foreign = _foreign_copy(machine_profile_path(profiles, discover()), root / "foreign.csv")
    plan = root / "plan.json"
    assert on_stderr("run", str(model), "--save-plan", str(plan), "--repeat", "1")[0] == 0
    return World(root, model, profiles, foreign, plan)


STAGE_LINE = re.compile(r"^\w+: \d+(/\d+)? steps")  # progress in a log (cli.common.StageLog)


def the_line(stderr: str, starts: str = "error: ") -> str:
    """The one line of ``stderr`` that is not progress; it must start with ``starts``."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip() and not STAGE_LINE.match(line)]
    assert len(lines) == 1 and lines[0].startswith(starts), stderr
    return lines[0]


def assert_error(code: int, stderr: str, *fragments: str) -> None:
    """Exit status 2 and one ``error:`` line holding every fragment (progress lines aside)."""
    assert code == 2, stderr
    line = the_line(stderr)
    for fragment in fragments:
        assert fragment in line, (fragment, line)


def on_stderr(*args: str) -> tuple[int, str]:
    """Run the command line in-process: its exit status and its stderr (stdout is the work's)."""
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.stdout, result.stdout
    return result.exit_code, result.stderr


def inject(monkeypatch: pytest.MonkeyPatch, code: int, pattern: str) -> list[str]:
    """Make every atomic write of a file named like ``pattern`` fail with ``code``.

    ENOSPC: the data goes to ``/dev/full``, whose writes the kernel refuses as a full disk
    does. EACCES: the temporary file beside the target is refused, as in a folder the user
    may not write. Returns the list of the names hit, filled as writes fail.
    """
    real = tempfile.mkstemp
    hit: list[str] = []

    def mkstemp(*args: object, **kwargs: object) -> tuple[int, str]:
        fd, name = real(*args, **kwargs)  # type: ignore[call-overload]
        target = str(kwargs.get("prefix", ""))[1:-1]
        if not fnmatch.fnmatch(target, pattern):
            return fd, name
        hit.append(target)
        os.close(fd)
        if code == errno.ENOSPC:
            return os.open("/dev/full", os.O_WRONLY), name
        os.unlink(name)
        raise PermissionError(code, os.strerror(code), name)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    return hit


def no_temporary_files(*folders: Path) -> bool:
    return not [p for folder in folders for p in folder.rglob(".*.tmp")]


def _tune(world: World, tmp_path: Path, *extra: str) -> list[str]:
    """A tune from another machine's profile: it plans and saves, nothing runs."""
    return [
        "tune", str(world.model), "--profile", str(world.foreign),
        "--search-dir", str(tmp_path / "search"), *extra,
    ]  # fmt: skip


def _case_args(case: str, world: World, tmp_path: Path) -> tuple[list[str], str]:
    """The command line of a write path, and the name of the file it writes."""
    fresh = str(tmp_path / "fresh-profiles")
    cases = {
        "profile": (["profile", str(world.model), "--targets", "cpu@numpy",
                     "--profiles", fresh, "--budget", "1"], "*.csv"),
        "tune plan.json": (_tune(world, tmp_path), "plan.json"),
        "tune -o": (_tune(world, tmp_path, "-o", str(tmp_path / "out.json")), "out.json"),
        "tune report.json": (_tune(world, tmp_path), "report.json"),
        "tune report.csv": (_tune(world, tmp_path), "report.csv"),
        "tune profile": (["tune", str(world.model), "--targets", "cpu@numpy", "--profiles",
                          fresh, "--search-dir", str(tmp_path / "search")], "*.csv"),
        "run --save-plan": (["run", str(world.model), "--repeat", "1", "--save-plan",
                             str(tmp_path / "saved.json")], "saved.json"),
        "run --out": (["run", str(world.model), "--repeat", "1", "--out",
                       str(tmp_path / "out.npz")], "out.npz"),
        "show --html": (["show", str(world.plan), "--html", str(tmp_path / "page.html")],
                        "page.html"),
    }  # fmt: skip
    return cases[case]


WRITE_PATHS = [
    "profile",
    "tune plan.json",
    "tune -o",
    "tune report.json",
    "tune report.csv",
    "tune profile",
    "run --save-plan",
    "run --out",
    "show --html",
]


@pytest.mark.parametrize("code", sorted(FAILURES), ids=errno.errorcode.get)
@pytest.mark.parametrize("case", WRITE_PATHS)
def test_a_failed_write_is_one_line_naming_the_file_and_leaves_nothing_behind(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, code: int
) -> None:
    args, pattern = _case_args(case, world, tmp_path)
    hit = inject(monkeypatch, code, pattern)
    exit_code, output = on_stderr(*args)
    assert hit, f"{case} wrote no file named {pattern}: {output}"
    assert_error(exit_code, output, FAILURES[code], "cannot write", hit[0])
    assert no_temporary_files(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("code", sorted(FAILURES), ids=errno.errorcode.get)
def test_a_failed_bench_csv_is_one_line(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    csv = tmp_path / "bench.csv"
    hit = inject(monkeypatch, code, "bench.csv")
    exit_code, output = on_stderr(
        "bench", str(world.model), "--targets", TARGETS, "--profiles", str(world.profiles),
        "--search-dir", str(tmp_path / "search"), "--rounds", "1", "--csv", str(csv),
    )  # fmt: skip
    assert hit == ["bench.csv"]
    assert_error(exit_code, output, FAILURES[code], str(csv))
    assert not csv.exists() and no_temporary_files(tmp_path)


def test_a_failed_replace_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_bytes(b"old")
    with pytest.MonkeyPatch.context() as patch:
        inject(patch, errno.ENOSPC, "plan.json")
        with pytest.raises(Exception, match="No space left on device") as caught:
            atomic_write_bytes(path, b"new" * 1000)
    assert type(caught.value).__name__ == "OutputError"
    assert path.read_bytes() == b"old" and no_temporary_files(tmp_path)


def test_a_symlink_is_written_through_and_kept(world: World, tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    code, output = on_stderr(*_tune(world, tmp_path, "-o", str(link)))
    assert code == 0, output
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert '"schema": "autopart.plan"' in target.read_text()


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "private.json"
    path.write_text("old")
    path.chmod(0o600)
    atomic_write_bytes(path, b"new")
    assert path.read_text() == "new" and (path.stat().st_mode & 0o777) == 0o600


@pytest.mark.slow
def test_a_read_only_profile_is_refused_before_measuring_and_left_as_it_was(
    world: World, tmp_path: Path
) -> None:
    profiles = tmp_path / "profiles"
    shutil.copytree(world.profiles, profiles)
    path = machine_profile_path(profiles, discover())
    before = path.read_bytes()
    path.chmod(0o444)
    code, output = on_stderr(
        "profile", str(world.model), "--targets", "cpu@numpy", "--profiles", str(profiles),
        "--refresh",
    )  # fmt: skip
    assert_error(code, output, str(path), "read-only")
    assert path.read_bytes() == before and (path.stat().st_mode & 0o777) == 0o444
    # planning from it as it is, with --profile, still works
    code, output = on_stderr(*_tune(world, tmp_path), "--profile", str(path))
    assert code == 0, output


@pytest.mark.parametrize("how", ["folder", "EACCES"])
def test_a_lock_file_that_cannot_be_opened_is_refused_before_measuring(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    profiles = tmp_path / "profiles"
    path = machine_profile_path(profiles, discover())
    lock = path.with_name(f".{path.name}.lock")
    if how == "folder":
        lock.mkdir(parents=True)
    else:  # root opens a read-only file anyway: what a user sees is injected
        lock.parent.mkdir(parents=True)
        lock.touch(mode=0o444)
        real_open = open

        def refusing_open(file: object, *args: object, **kwargs: object) -> object:
            if Path(str(file)) == lock:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
            return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr("autopart.io.open", refusing_open, raising=False)
    for command in ("profile", "tune"):
        code, output = on_stderr(
            command, str(world.model), "--targets", "cpu@numpy", "--profiles", str(profiles),
            *(["--search-dir", str(tmp_path / "search")] if command == "tune" else []),
        )  # fmt: skip
        assert_error(code, output, str(lock))
        assert not path.exists()  # refused before anything was measured


def test_a_plan_file_that_is_a_folder_is_refused_before_the_work(
    world: World, tmp_path: Path
) -> None:
    code, output = on_stderr(*_tune(world, tmp_path))
    assert code == 0, output
    (plan,) = (tmp_path / "search").glob("*/plan.json")
    plan.unlink()
    plan.mkdir()
    fresh = tmp_path / "fresh-profiles"
    code, output = on_stderr(
        "tune", str(world.model), "--targets", TARGETS, "--profiles", str(fresh),
        "--search-dir", str(tmp_path / "search"),
    )  # fmt: skip
    assert_error(code, output, str(plan), "is a folder")
    code, output = on_stderr(*_tune(world, tmp_path))  # the search folder is the same
    assert_error(code, output, str(plan), "is a folder")
    assert not fresh.exists()  # nothing was measured


# -- study databases -----------------------------------------------------------------------

DAMAGE = {
    "NULL attribute": "UPDATE study_user_attributes SET value_json = NULL",
    "bad JSON attribute": "UPDATE study_user_attributes SET value_json = '{not json'",
    "bad JSON trial": "UPDATE trial_user_attributes SET value_json = '{nope'",
    "NULL trial attribute": "UPDATE trial_user_attributes SET value_json = NULL",
    "NULL value": "UPDATE trial_values SET value = NULL",
    "dropped values": "DROP TABLE trial_values",
    "dropped studies": "DROP TABLE studies",
}


@pytest.fixture(scope="module")
def study(world: World, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A search folder whose study.db holds a finished makespan study of the tiny model."""
    search = tmp_path_factory.mktemp("study") / "search"
    code, output = on_stderr(*_tune(world, search.parent, "--objective", "makespan"))
    assert code == 0, output
    return search


def _damaged(study: Path, tmp_path: Path, sql: str) -> tuple[Path, Path]:
    search = tmp_path / "search"
    shutil.copytree(study, search)
    (database,) = search.glob("*/study.db")
    with sqlite3.connect(database) as connection:
        connection.executescript(sql)
    return search, database


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_study_is_one_line_naming_its_database(
    world: World, study: Path, tmp_path: Path, damage: str
) -> None:
    search, database = _damaged(study, tmp_path, DAMAGE[damage])
    code, output = on_stderr(
        "tune", str(world.model), "--profile", str(world.foreign), "--search-dir", str(search),
        "--objective", "makespan",
    )  # fmt: skip
    assert_error(code, output, f"study database {database}", "damaged")


def test_a_study_with_damaged_pages_is_refused_before_measuring(
    world: World, study: Path, tmp_path: Path
) -> None:
    search, database = _damaged(study, tmp_path, "")
    data = bytearray(database.read_bytes())
    for page in range(3 * 4096, len(data), 4096):
        data[page + 100 : page + 400] = b"\xff" * 300
    database.write_bytes(bytes(data))
    fresh = tmp_path / "fresh-profiles"
    code, output = on_stderr(
        "tune", str(world.model), "--targets", "cpu@numpy,cpu/0@onnxruntime", "--profiles",
        str(fresh), "--search-dir", str(search), "--objective", "makespan",
    )  # fmt: skip
    assert_error(code, output, str(database), "malformed")
    assert not fresh.exists()  # refused before profiling


@pytest.mark.parametrize("how", ["chmod 444", "mode=ro"])
def test_a_read_only_study_is_one_line(world: World, study: Path, tmp_path: Path, how: str) -> None:
    search, database = _damaged(study, tmp_path, "")
    if how == "chmod 444":
        database.chmod(0o444)
        storage = f"sqlite:///{database}"
    else:  # SQLite's own read-only mode: what a user who may not write the file gets
        storage = f"sqlite:///file:{database}?mode=ro&uri=true"
    code, output = on_stderr(
        "tune", str(world.model), "--profile", str(world.foreign), "--search-dir", str(search),
        "--objective", "makespan", "--storage", storage,
    )  # fmt: skip
    assert_error(code, output, str(database), "read-only")


# -- a real full file system ---------------------------------------------------------------


def _can_mount() -> str | None:
    """Why a test cannot mount a small tmpfs in a mount namespace of its own (None: it can)."""
    if not shutil.which("unshare"):
        return "unshare is not installed"
    probe = subprocess.run(
        ["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"cannot mount a tmpfs here: {probe.stderr.strip() or probe.returncode}"
    return None


@pytest.fixture(scope="module")
def mountable() -> Iterator[None]:
    why = _can_mount()
    if why is not None:
        pytest.skip(why)
    yield


def _on_a_full_disk(tmp_path: Path, free_kib: int, *args: str) -> subprocess.CompletedProcess:
    """Run ``python -m autopart ARGS`` with a tmpfs at tmp_path/mnt holding ``free_kib`` free.

    ``{mnt}`` in ARGS is the mount point. The tmpfs lives in a mount namespace of its own,
    gone with the process.
    """
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    fill = 256 - free_kib
    command = " ".join(
        [sys.executable, "-m", "autopart", *(a.replace("{mnt}", str(mnt)) for a in args)]
    )
    script = (
        f"mount -t tmpfs -o size=256k tmpfs {mnt} && "
        f"head -c {fill * 1024} /dev/zero > {mnt}/fill && cd {ROOT} && exec {command}"
    )
    return subprocess.run(
        ["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, timeout=300
    )


def test_outputs_bigger_than_the_room_left_are_one_line(mountable: None, tmp_path: Path) -> None:
    model = tmp_path / "wide.onnx"
    onnx.save(tiny_model(["Relu"], shape=[1, 64, 512]), str(model))  # 128 KiB of output
    done = _on_a_full_disk(
        tmp_path, 96, "run", str(model), "--repeat", "1", "--out", "{mnt}/out.npz"
    )
    assert_error(done.returncode, done.stderr, os.strerror(errno.ENOSPC), "out.npz")


@pytest.mark.parametrize("command", ["profile", "tune"])
def test_a_full_disk_is_refused_before_measuring(
    mountable: None, world: World, tmp_path: Path, command: str
) -> None:
    search = ["--search-dir", str(tmp_path / "search")] if command == "tune" else []
    done = _on_a_full_disk(
        tmp_path, 16, command, str(world.model), "--targets", "cpu@numpy",
        "--profiles", "{mnt}/profiles", *search,
    )  # fmt: skip
    assert_error(done.returncode, done.stderr, os.strerror(errno.ENOSPC), "profile")
    assert "steps" not in done.stderr  # no stage ran


def test_check_writable_writes_a_probe_and_leaves_nothing(tmp_path: Path) -> None:
    check_writable(tmp_path / "sub" / "plan.json", "plan file")
    assert list(tmp_path.iterdir()) == []
