"""The validation layer of each saved format: plans and profiles are refused in one line.

Every probe here broke something before: a profile row with an ``inf`` median made ``tune``
loop forever, a plan nested 100,000 deep or with a 5,000-digit integer raised from the JSON
parser, a plan file that is a symlink to ``/dev/zero`` was read until MemoryError.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from autopart.errors import ProfileError
from autopart.plan.schema import Plan, PlanError
from autopart.profile import Profile
from tests.opencl_here import needs_opencl
from tests.profile_text import cells, rewrite_rows
from tests.test_errors import assert_one_line_error, invoke
from tests.test_profile import FAST, tiny_cnn

TARGETS = ["cpu@numpy", "cpu@onnxruntime", "opencl:0@opencl"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A tiny model, its profile on this machine and the plan `tune` made from it."""
    from autopart import api

    folder = tmp_path_factory.mktemp("saved")
    model = folder / "tiny.onnx"
    model.write_bytes(tiny_cnn().SerializeToString())
    _, _, profile = api.profile(str(model), TARGETS, folder / "profiles", settings=FAST)
    code, output = invoke(
        "run", str(model), "--assign", "Conv=cpu@onnxruntime", "--save-plan",
        str(folder / "plan.json"), "--repeat", "1",
    )  # fmt: skip
    assert code == 0, output
    return model, profile, folder / "plan.json"


def _rewrite_rows(source: Path, target: Path, change: dict[str, object], kind: str) -> Path:
    def edit(rows: pd.DataFrame) -> pd.DataFrame:
        first = rows.index[rows["kind"] == kind][0]
        for column, value in change.items():
            rows.loc[first, column] = str(value)
        return rows

    target.write_text(rewrite_rows(source.read_text(), edit))
    return target


@pytest.mark.parametrize(
    ("kind", "change", "fragment"),
    [
        ("launch", {"median_s": "inf"}, "infinite"),
        ("op", {"median_s": "inf"}, "infinite"),
        ("op", {"median_s": "1e300"}, "over 3600 s"),
        ("transfer", {"median_s": "0"}, "took no time"),
        ("fused", {"median_s": "0", "timer": "wall"}, "took no time"),
        ("op", {"median_s": "-1e-3"}, "negative"),
        ("op", {"median_s": "nan"}, "corrupt"),
        ("op", {"runs": "-3"}, "runs count"),
        ("op", {"runs": "0"}, "no runs"),
        ("op", {"target": "nowhere"}, "not a target"),
        ("transfer", {"target": "cpu"}, "not a target"),
        ("op", {"kernel_s": "inf"}, "reference time"),
    ],
)
@needs_opencl
def test_corrupt_profile_rows_are_refused_in_one_line(
    saved: tuple[Path, Path, Path], tmp_path: Path, kind: str, change: dict[str, object],
    fragment: str,
) -> None:  # fmt: skip
    model, profile, _ = saved
    rows = Profile.load(profile).rows(kind)
    if rows.empty:
        pytest.skip(f"this machine's profile has no {kind} rows")
    broken = _rewrite_rows(profile, tmp_path / "broken.csv", change, kind)
    with pytest.raises(ProfileError, match=fragment):
        Profile.load(broken)
    code, output = invoke("tune", str(model), "--profile", str(broken))
    assert_one_line_error(code, output, fragment)
    assert output.startswith("error: ")  # no blank line from a progress display before it


@needs_opencl
def test_a_fused_pair_of_views_on_a_device_clock_may_take_no_time(
    saved: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    _, profile, _ = saved
    rows = cells(profile.read_text())
    on_device = rows.index[(rows["kind"] == "fused") & (rows["timer"] != "wall")]
    if on_device.empty:
        pytest.skip("this machine's profile has no fused pairs timed on a device clock")

    def edit(rows: pd.DataFrame) -> pd.DataFrame:
        rows.loc[on_device[0], ["median_s", "q1_s", "q3_s", "min_s", "max_s"]] = "0"
        return rows

    rewritten = tmp_path / "views.csv"
    rewritten.write_text(rewrite_rows(profile.read_text(), edit))
    assert (Profile.load(rewritten).rows("fused")["median_s"] == 0).sum() == 1


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"schema": "autopart.plan", "version": ' + "9" * 5000 + "}", "not valid JSON"),
        ('{"schema": "autopart.plan", "version": NaN}', "not valid JSON"),
        ('{"schema": "autopart.plan", "version": true}', "version"),
    ],
)
def test_pathological_plan_documents_are_refused(
    tmp_path: Path, document: str, fragment: str
) -> None:
    path = tmp_path / "plan.json"
    path.write_text(document)
    with pytest.raises(PlanError, match=fragment):
        Plan.load(path)
    assert_one_line_error(*invoke("show", str(path)), fragment)


def test_a_plan_that_is_a_symlink_to_dev_zero_is_read_no_further_than_a_limit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "plan.json"
    os.symlink("/dev/zero", path)
    assert_one_line_error(*invoke("run", str(path)), "larger than")


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("model.source", None, "source"),
        ("partitions", 5, "partitions"),
        ("partitions.0.nodes", 5, "nodes"),
        ("storage.cpu.buffers.0.nbytes", -8, "nbytes"),
        ("storage.cpu.buffers.0.nbytes", float("nan"), "not valid JSON"),
        ("storage.cpu.buffers.0.nbytes", 1, "too few"),
        ("storage.cpu.buffers.1.values", ["x"], "held by buffers"),
        (
            "storage.nowhere",
            {"weights_bytes": 0, "activation_peak_bytes": 0, "buffers": []},
            "none of its steps",
        ),
    ],
)
@needs_opencl
def test_ill_typed_plan_fields_are_refused(
    saved: tuple[Path, Path, Path], tmp_path: Path, field: str, value: object, fragment: str
) -> None:
    _, _, plan_path = saved
    document = json.loads(plan_path.read_text())
    del document["check"]  # edited by hand
    *parents, last = field.split(".")
    node = document
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    assert_one_line_error(*invoke("run", str(path)), fragment)


@needs_opencl
def test_notes_are_styled_not_shown_as_markup(
    saved: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    model, profile_path, _ = saved
    profile = Profile.load(profile_path)
    profile.meta["fingerprint"] = "another-machine"
    foreign = tmp_path / "foreign.csv"
    profile.save(foreign)
    code, output = invoke(
        "tune", str(model), "--profile", str(foreign), "--search-dir", str(tmp_path / "s")
    )
    assert code == 0, output
    assert "note: planned for machine another-machine" in output
    assert "[yellow]" not in output and "[/" not in output
