"""Fault injection: every format autopart saves and reads back, cut short and with bytes flipped.

Each saved format (a profile, a plan, an ``.npz`` of tensors) is truncated at many offsets
and has bytes flipped at many offsets. Every case must end in one of two ways: a clean
:class:`~autopart.errors.AutopartError` of one line naming the file, or a correct read, the
original values exactly (a profile may also drop rows, if it says how many). Never another
exception, and never a wrong value. The counts are printed (``pytest -s``) and checked.

Then the reproductions of issue 31 (a profile cut inside its last row read as good data),
and the profiler's reuse of finished work: a row with k of its n passes gets n - k more,
and ``--refresh`` replaces a row only once its new measurement is complete.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from autopart import api
from autopart.costmodel import Measurement
from autopart.costmodel.measurements import RowKind
from autopart.errors import AutopartError
from autopart.io import load_tensors, save_tensors
from autopart.plan.schema import Plan
from autopart.profile import Profile, TimingSettings, machine_profile_path
from autopart.profile.store import COLUMNS, COLUMNS_V3, KEY
from autopart.progress import Progress
from autopart.targets.devices import discover
from tests.test_errors import assert_one_line_error, invoke
from tests.test_profile import FAST, tiny_cnn

NUMPY, ORT = "cpu@numpy", "cpu/0@onnxruntime"
MASKS = (0x01, 0x04, 0x20, 0x80, 0xFF)  # XORed into a byte: one bit, case, high bit, all
STRUCTURE = b',"\n'  # bytes written over one: cells, quotes and lines of CSV, JSON's quotes
ONE_RUN_A_PASS = replace(FAST, min_runs=3, max_runs=3, batch=3)  # 3 samples in every pass
SHORT = replace(FAST, max_seconds=0.02)  # launch probes: some 100 samples a pass, not 1000
CASES = {".csv": 1000, ".json": 1200, ".npz": 1500}  # a profile reads in 15 ms, a plan in 4


@dataclass(frozen=True)
class Saved:
    """One file of each format, as autopart wrote it, and the model they belong to."""

    model: Path
    profile: Path
    plan: Path
    tensors: Path


def _stop_at(suffix: str) -> Callable[[int, int, str], None]:
    """A progress callback that interrupts profiling at its first step labelled ``suffix``."""

    def progress(done: int, total: int, label: str) -> None:
        if label.endswith(suffix):
            raise KeyboardInterrupt

    return progress


def _profile(
    model: Path | onnx.ModelProto,
    folder: Path,
    targets: list[str],
    settings: TimingSettings = FAST,
    progress: Progress | None = None,
    refresh: bool = False,
) -> None:
    """``api.profile``, which an interrupt from ``progress`` ends (saving what it measured)."""
    with contextlib.suppress(KeyboardInterrupt):
        api.profile(model, targets, folder, settings=settings, progress=progress, refresh=refresh)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Saved:
    """A profile with complete rows and rows cut short after a pass, a plan and tensors."""
    folder = tmp_path_factory.mktemp("saved")
    model = folder / "tiny.onnx"
    onnx.save(tiny_cnn(), str(model))
    profiles = folder / "profiles"
    _profile(model, profiles, [NUMPY], SHORT)
    _profile(model, profiles, [ORT], SHORT, progress=_stop_at("(2/3)"))
    plan, _ = api.make_plan(str(model), ["Conv=cpu@onnxruntime"], fallback=NUMPY)
    plan.save(folder / "plan.json")
    rng = np.random.default_rng(0)
    tensors = {
        "y": rng.standard_normal((1, 4, 8, 8)).astype(np.float32),
        "indices": np.arange(12, dtype=np.int64).reshape(3, 4),
        "scale": np.float64(0.125),
    }
    save_tensors(folder / "tensors.npz", tensors)
    path = machine_profile_path(profiles, discover())
    return Saved(model, path, folder / "plan.json", folder / "tensors.npz")


# -- the cases -----------------------------------------------------------------------------
def damaged_copies(data: bytes, cases: int) -> Iterator[tuple[str, bytes]]:
    """About ``cases`` copies of ``data``: cut at offsets spread evenly and next to each line
    end, and with bytes flipped (:data:`MASKS`) or overwritten (:data:`STRUCTURE`) at
    offsets spread alike."""
    every = max(1, 3 * len(data) // cases)
    ends = [i for i, byte in enumerate(data) if byte == ord("\n")]
    cuts = {*range(0, len(data), every), *(i + d for i in ends for d in (-1, 0, 1)), len(data) - 1}
    for offset in sorted(c for c in cuts if 0 <= c < len(data)):
        yield f"cut at {offset}", data[:offset]
    for index, offset in enumerate(range(0, len(data), every)):
        mask = MASKS[index % len(MASKS)]
        yield f"byte {offset} ^ {mask:#x}", _put(data, offset, data[offset] ^ mask)
        new = STRUCTURE[index % len(STRUCTURE)]
        if data[offset] != new:
            yield f"byte {offset} = {chr(new)!r}", _put(data, offset, new)


def _put(data: bytes, offset: int, value: int) -> bytes:
    return data[:offset] + bytes([value]) + data[offset + 1 :]


def run_cases(source: Path, read: Callable[[Path], str], tmp_path: Path) -> Counter[str]:
    """Write damaged copies of ``source`` (:data:`CASES`) and ``read`` each; count outcomes.

    ``read`` returns ``"intact"`` or ``"dropped"`` for a correct read (and raises
    AssertionError for a wrong one); an AutopartError must be one line naming the file.
    """
    path = tmp_path / f"damaged{source.suffix}"
    outcomes: Counter[str] = Counter()
    failures = []
    for case, data in damaged_copies(source.read_bytes(), CASES[source.suffix]):
        path.write_bytes(data)
        try:
            outcomes[read(path)] += 1
        except AutopartError as error:
            message = str(error)
            if "\n" in message or str(path) not in message:
                failures.append(f"{case}: an error not of one line naming the file: {message!r}")
            outcomes["error"] += 1
        except Exception as error:
            failures.append(f"{case}: {type(error).__name__}: {error}")
    print(f"{source.name}: {sum(outcomes.values())} cases, {dict(outcomes)}")
    assert not failures, f"{len(failures)} bad outcomes, e.g. {failures[:5]}"
    assert sum(outcomes.values()) >= CASES[source.suffix]
    return outcomes


def _rows(profile: Profile) -> dict[tuple[str, str, str], tuple[object, ...]]:
    """Each row of ``profile`` by key, NaN as None (so that equal rows compare equal)."""
    columns = [profile.table[column].tolist() for column in profile.table.columns]
    rows = [tuple(None if v != v else v for v in row) for row in zip(*columns, strict=True)]
    return {row[:3]: row for row in rows}


@pytest.mark.slow
def test_a_damaged_profile_reads_only_whole_rows_and_says_what_it_dropped(
    saved: Saved, tmp_path: Path
) -> None:
    original = Profile.load(saved.profile)
    rows = _rows(original)
    assert any(original.table["partial"] != "") and any(original.table["partial"] == "")

    def read(path: Path) -> str:
        loaded = Profile.load(path)
        assert loaded.meta == original.meta
        found = _rows(loaded)
        wrong = [key for key, row in found.items() if rows.get(key) != row]
        assert not wrong, f"rows read with other values: {wrong[:3]}"
        assert loaded.dropped.count == len(rows) - len(found), loaded.dropped
        return "dropped" if found != rows else "intact"

    outcomes = run_cases(saved.profile, read, tmp_path)
    assert outcomes["dropped"] > 0.5 * sum(outcomes.values()) and outcomes["error"]


def test_a_damaged_plan_is_refused_in_one_line_naming_it(saved: Saved, tmp_path: Path) -> None:
    original = json.dumps(Plan.load(saved.plan).to_dict(), sort_keys=True)

    def read(path: Path) -> str:
        assert json.dumps(Plan.load(path).to_dict(), sort_keys=True) == original
        return "intact"

    outcomes = run_cases(saved.plan, read, tmp_path)
    assert outcomes["error"] > 0.95 * sum(outcomes.values())


def test_damaged_tensors_are_refused_in_one_line_naming_the_file(
    saved: Saved, tmp_path: Path
) -> None:
    original = load_tensors(saved.tensors)

    def read(path: Path) -> str:
        loaded = load_tensors(path, expected=list(original))
        assert list(loaded) == list(original)
        for name, array in original.items():
            same = loaded[name].dtype == array.dtype and loaded[name].shape == array.shape
            assert same and np.array_equal(loaded[name], array), name
        return "intact"

    outcomes = run_cases(saved.tensors, read, tmp_path)
    assert outcomes["error"] > 0.5 * sum(outcomes.values())


def test_a_damaged_plan_or_tensor_file_is_one_error_line_on_the_command_line(
    saved: Saved, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(saved.plan.read_text().replace('"nbytes": 1024', '"nbytes": 1025', 1))
    assert plan.read_text() != saved.plan.read_text()
    assert_one_line_error(*invoke("show", str(plan)), str(plan), "is damaged")
    tensors = tmp_path / "x.npz"
    save_tensors(tensors, {"x": np.ones((1, 4, 8, 8), np.float32)})
    data = bytearray(tensors.read_bytes())
    data[200] ^= 0x01  # inside the array's values
    tensors.write_bytes(bytes(data))
    code, output = invoke("run", str(saved.model), "--inputs", str(tensors), "--repeat", "1")
    assert_one_line_error(code, output, str(tensors), "CRC")


def test_tune_says_how_many_rows_of_its_profile_it_dropped(saved: Saved, tmp_path: Path) -> None:
    foreign = Profile.load(saved.profile)
    foreign.meta["fingerprint"] = "another-machine"  # tune --profile then plans only
    foreign.record("op", NUMPY, "Gemm:13 {} () -> ()", Measurement(2e-5, 2e-5, 2e-5, 2e-5, 2e-5, 3))
    path = tmp_path / "foreign.csv"
    foreign.save(path)
    text = path.read_text()
    path.write_text(text.replace("Gemm:13 {} () -> (),,2e-05", "Gemm:13 {} () -> (),,2e-08", 1))
    assert path.read_text() != text
    code, output = invoke(
        "tune", str(saved.model), "--profile", str(path), "--search-dir", str(tmp_path / "s")
    )
    assert code == 0, output
    assert f"note: profile {path}: dropped 1 row that failed its check (damaged)" in " ".join(
        output.split()
    )


# -- the reproductions ---------------------------------------------------------------------
def as_schema_3(profile: Profile) -> str:
    """``profile`` written as schema 3 wrote it: no checks, no ``partial``, pandas' CSV."""
    buffer = io.StringIO()
    buffer.write("# autopart.profile 3\n")
    buffer.write(f"# {json.dumps(profile.meta, sort_keys=True, default=str)}\n")
    profile.table.sort_values(KEY, kind="stable")[COLUMNS_V3].to_csv(buffer, index=False)
    return buffer.getvalue()


def _prefix(line: str, cells: int) -> str:
    """The text of ``line`` (one CSV row) up to the end of its first ``cells`` cells."""
    parsed = next(csv.reader([line]))
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(parsed[:cells])
    assert line.startswith(buffer.getvalue())
    return buffer.getvalue()


@pytest.mark.parametrize("schema", [3, 4])
def test_a_profile_cut_inside_its_last_row_never_reads_a_wrong_value(
    tmp_path: Path, schema: int
) -> None:
    """Issue 31: ``9.6203e-05`` cut to ``9.6203`` was read, used and saved back."""
    profiles, model = tmp_path / "profiles", tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), str(model))
    _, stamped, path = api.profile(str(model), [NUMPY], profiles, settings=FAST)
    measured = stamped.table["kind"] != RowKind.SPEED.value  # a speed stamp is never re-taken
    profile = Profile(stamped.meta, stamped.table[measured].reset_index(drop=True))
    last = profile.table.sort_values(KEY, kind="stable").index[-1]
    profile.table.loc[last, "median_s"] = 9.6203e-05
    text = as_schema_3(profile) if schema == 3 else profile.to_text()
    cut = text.rindex("9.6203e-05") + len("9.6203")
    path.write_text(text[:cut])
    loaded = Profile.load(path)
    assert len(loaded.table) == len(profile.table) - 1 and loaded.dropped.count == 1
    assert not (loaded.table["median_s"] > 1).any()  # 9.6203 s: 100,000 times too large
    code, output = invoke("profile", str(model), "--targets", NUMPY, "--profiles", str(profiles))
    assert code == 0, output
    assert "dropped 1 row that failed its check" in " ".join(output.split())
    again = Profile.load(path)
    rows = again.table[again.table["kind"] != RowKind.SPEED.value]
    assert len(rows) == len(profile.table) and not again.dropped.count
    assert (rows["median_s"] < 1).all() and (rows["passes"] == 3).all()


def test_a_schema_3_row_cut_after_kernel_s_is_dropped_not_read_without_its_date(
    tmp_path: Path,
) -> None:
    """Issue 31: a row cut off after ``kernel_s`` was accepted with an empty ``measured_at``."""
    _, profile, _ = api.profile(tiny_cnn(), [ORT], tmp_path, settings=FAST)
    lines = as_schema_3(profile).split("\n")  # two header lines, the columns, the rows
    row = max(i for i, line in enumerate(lines) if line.startswith("layout,"))
    kept = _prefix(lines[row], COLUMNS_V3.index("kernel_s") + 1)
    cut = Profile.from_text("\n".join([*lines[:row], kept]), "cut.csv")  # the file ends there
    assert len(cut.table) == row - 3 and cut.dropped.cut_short and cut.dropped.count == 1
    short = Profile.from_text("\n".join([*lines[:row], kept, *lines[row + 1 :]]), "short.csv")
    assert len(short.table) == len(profile.table) - 1 and short.dropped.damaged == 1
    for loaded in (cut, short):
        assert (loaded.table["measured_at"] != "").all() and not loaded.dropped.checked
        assert _rows(loaded).items() <= _rows(profile).items()


# -- the passes each row lacks -------------------------------------------------------------
def _partial(profile: Profile, key: tuple[str, str, str]) -> list[list[float]]:
    row = profile.row(*key)
    assert row is not None
    return json.loads(row["partial"])["samples"] if row["partial"] else []


def _pass_labels(labels: list[str]) -> list[str]:
    """The progress labels of measuring jobs (``... (pass/passes)``), not of planning them."""
    return [label for label in labels if re.search(r"\(\d+/\d+\)$", label)]


def test_a_row_with_k_of_n_passes_gets_the_n_minus_k_it_lacks(tmp_path: Path) -> None:
    graph, targets = tiny_cnn(), [NUMPY, ORT]
    settings = ONE_RUN_A_PASS
    _profile(graph, tmp_path, targets, settings=settings, progress=_stop_at("(2/3)"))
    path = machine_profile_path(tmp_path, discover())
    first = Profile.load(path)
    multi = [key for key in _rows(first) if first.row(*key)["kind"] not in ("fused",)]
    assert multi and all(first.row(*key)["passes"] == 1 for key in multi)
    steps: list[str] = []
    _profile(graph, tmp_path, targets, settings=settings, progress=lambda d, t, label: (
        steps.append(label), _stop_at("(3/3)")(d, t, label)))  # fmt: skip
    second = Profile.load(path)
    steps = _pass_labels(steps)
    assert steps[-1].endswith("(3/3)")  # stopped there: each multi-pass job has 2 passes in
    assert all(label.endswith("(2/3)") for label in steps[:-1])  # pass 1 is not taken again
    for key in multi:
        assert second.row(*key)["passes"] == 2
        assert _partial(second, key)[0] == _partial(first, key)[0]  # the first pass, as it was
    steps.clear()
    report, _, _ = api.profile(graph, targets, tmp_path, settings=settings,
                               progress=lambda d, t, label: steps.append(label))  # fmt: skip
    third = Profile.load(path)
    jobs = _pass_labels(steps)
    assert jobs and all(label.endswith("(3/3)") for label in jobs)
    assert report.resumed == report.new == len(jobs) and report.missing == 0
    for key in multi:
        row, known = third.row(*key), _partial(second, key)
        assert row["passes"] == 3 and row["partial"] == ""
        assert row["runs"] > sum(map(len, known))  # the two passes kept, and the third
        assert row["min_s"] <= min(map(min, known)) and row["max_s"] >= max(map(max, known))
        low, high = sorted(float(np.median(samples)) for samples in known)
        assert low <= row["median_s"] <= high  # the median of three passes' medians
    op = next(key for key in multi if key[0] == "op" and key[1] == NUMPY)
    assert third.row(*op)["runs"] == 3 * 3  # 3 samples in each of its passes, no more


def test_refresh_replaces_a_row_only_once_its_new_measurement_is_complete(
    tmp_path: Path,
) -> None:
    graph, targets = tiny_cnn(), [NUMPY, ORT]
    api.profile(graph, targets, tmp_path, settings=FAST)
    path = machine_profile_path(tmp_path, discover())
    before = _rows(Profile.load(path))
    one_pass = {key for key in before if key[0] in ("fused", "alone")}  # complete in pass 1
    assert one_pass and len(one_pass) < len(before)
    time.sleep(1.1)  # measurement times have one-second resolution
    _profile(graph, tmp_path, targets, refresh=True, progress=_stop_at("(2/3)"))
    during = Profile.load(path)
    assert _rows(during).keys() == before.keys()
    assert all(_rows(during)[key] == before[key] for key in before if key not in one_pass)
    assert all(during.row(*key)["passes"] == 1 for key in one_pass)
    assert all(_newer(during, key, before) for key in one_pass)  # measured again
    time.sleep(1.1)
    report, _, _ = api.profile(graph, targets, tmp_path, settings=FAST, refresh=True)
    after = Profile.load(path)
    assert report.new and not report.missing and not report.resumed  # all from scratch
    measured = [key for key in before if key[0] != RowKind.SPEED.value]  # stamps: never again
    assert all(_newer(after, key, _rows(during)) for key in measured)
    assert (after.table["passes"] == np.where(after.table["kind"] == "fused", 1, 3)).all()


def _newer(profile: Profile, key: tuple[str, str, str], than: dict[tuple, tuple]) -> bool:
    """Whether ``profile``'s row ``key`` was measured after the one in ``than``."""
    row = profile.row(*key)
    return row is not None and row["measured_at"] > than[key][COLUMNS.index("measured_at")]
