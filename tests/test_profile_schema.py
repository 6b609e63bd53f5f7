"""Profile files: row kinds, named reference columns, schema 2, and reading schema-1 files."""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart import api
from autopart.costmodel import Measurement, costs_from_profile
from autopart.costmodel.fusion import fusion_pairs
from autopart.costmodel.measurements import REFERENCE_COLUMNS, RowKind
from autopart.ir.graph import Graph
from autopart.ir.signature import op_signature
from autopart.profile import Profile
from autopart.profile.profiler import plan_jobs
from autopart.profile.store import COLUMNS, SCHEMA_VERSION
from autopart.targets.devices import discover
from autopart.targets.resolve import resolve
from tests.test_profile import tiny_cnn

TARGET = "cpu@onnxruntime"
OTHER = "other@0123456789ab"  # windows of another model, read where the model has none


def v1_profile_text(graph: Graph) -> str:
    """A schema-1 profile of ``graph`` on cpu@onnxruntime: every kind with a reference_s."""
    conv, relu, _, add = (op_signature(node, graph) for node in graph.nodes)
    pairs = fusion_pairs(graph)
    rows = [
        ("launch", "wall", 12e-6, "wall", ""),
        ("launch", "timed", 10e-6, "wall", ""),
        ("launch", "profiled", 3e-6, "event", ""),
        ("op", conv, 110e-6, "wall", ""),
        ("op", relu, 40e-6, "wall", ""),
        ("op", add, 50e-6, "wall", ""),
        ("layout", conv, 8e-6, "event", 30e-6),
        ("fused", pairs["relu1"].key(graph), 130e-6, "wall", 115e-6),
        ("fused", pairs["add"].key(graph), 140e-6, "wall", ""),  # from before the pairing
        ("calibration", f"{OTHER}[0:3]", 200e-6, "wall", 250e-6),
        ("calibration", f"{OTHER}[3:6]", 210e-6, "wall", 250e-6),
        ("cut", f"{OTHER}[0:3]", 500e-6, "wall", 300e-6),
        ("cut", f"{OTHER}[3:6]", 450e-6, "wall", 300e-6),
        ("cold", f"{OTHER}[0:3]", 400e-6, "wall", 300e-6),
        ("unsupported", "Where:13 {} () -> ()", 0.0, "none", ""),
    ]
    buffer = io.StringIO()
    buffer.write("# autopart.profile 1\n")
    buffer.write("# " + json.dumps({"fingerprint": "v1", "settings": {"passes": 3}}) + "\n")
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([
        "kind", "target", "key", "op_type", "median_s", "q1_s", "q3_s", "min_s", "max_s",
        "runs", "timer", "nbytes", "reference_s", "measured_at",
    ])  # fmt: skip
    for kind, key, median, timer, reference in rows:
        writer.writerow([
            kind, TARGET, key, "", median, median, median, median, median, 9, timer, 0,
            reference, "2026-11-01T00:00:00+00:00",
        ])  # fmt: skip
    return buffer.getvalue()


# what costs_from_profile made of v1_profile_text before schema 2 (commit fe01cd7)
V1_COSTS = {
    "gross": {
        "node_cost": {"conv1": 9.2e-05, "relu1": 1.5e-05, "conv2": 9.2e-05, "add": 3.0e-05},
        "unfused": {"relu1": 1.5e-05, "add": 1.0e-05},
    },
    "on": {
        "node_cost": {
            "conv1": 7.475e-05,
            "relu1": 1.21875e-05,
            "conv2": 7.475e-05,
            "add": 2.4375e-05,
        },
        "unfused": {"relu1": 1.21875e-05, "add": 8.125e-06},
    },
}


@pytest.mark.parametrize("mode", ["gross", "on"])
def test_a_schema_1_file_gives_the_costs_it_gave_before(mode: str) -> None:
    graph = api.load(tiny_cnn())
    profile = Profile.from_text(v1_profile_text(graph))
    costs = costs_from_profile(graph, profile, calibration=mode)
    (target,) = costs.targets
    expected = V1_COSTS[mode]
    for name, seconds in expected["node_cost"].items():
        assert costs.node_cost[name][target] == pytest.approx(seconds, rel=1e-12)
    for name, seconds in expected["unfused"].items():
        assert costs.unfused[name][target] == pytest.approx(seconds, rel=1e-12)
    assert costs.layout == {n: {target: pytest.approx(8e-6)} for n in ("conv1", "conv2")}
    assert costs.launch[target] == pytest.approx(175e-6)  # the cut, over the probe's 12 µs
    assert costs.cold[target] == pytest.approx(100e-6)
    assert costs.fused_producer == {"relu1": "conv1", "add": "conv2"}


def test_a_schema_1_file_moves_reference_s_to_its_kinds_column_and_saves_as_current(
    tmp_path: Path,
) -> None:
    graph = api.load(tiny_cnn())
    profile = Profile.from_text(v1_profile_text(graph))
    assert list(profile.table.columns) == COLUMNS and "reference_s" not in COLUMNS
    table = profile.table
    for kind, column in REFERENCE_COLUMNS.items():
        others = table[table["kind"] != kind]
        assert others[column].isna().all()
    layout = profile.row(RowKind.LAYOUT, TARGET, op_signature(graph.nodes[0], graph))
    assert layout is not None and layout["kernel_s"] == 30e-6
    fused = profile.rows(RowKind.FUSED, TARGET).set_index("median_s")["producer_s"]
    assert fused[130e-6] == 115e-6 and math.isnan(fused[140e-6])
    assert profile.rows(RowKind.CALIBRATION)["predicted_s"].tolist() == [250e-6, 250e-6]
    assert profile.rows(RowKind.CUT)["whole_s"].tolist() == [300e-6, 300e-6]
    assert profile.rows(RowKind.COLD)["warm_s"].tolist() == [300e-6]
    # passes as the file's profiler asked: 3, but 1 for fusion pairs and 0 where unsupported
    passes = dict(zip(table["kind"], table["passes"], strict=False))
    assert passes == {
        "launch": 3, "op": 3, "layout": 3, "fused": 1, "calibration": 3, "cut": 3, "cold": 3,
        "unsupported": 0,
    }  # fmt: skip
    path = tmp_path / "p.csv"
    path.write_text(v1_profile_text(graph))
    Profile.load(path).save(path)
    assert path.read_text().startswith(f"# autopart.profile {SCHEMA_VERSION}\n")
    pd.testing.assert_frame_equal(
        Profile.load(path).table.drop(columns="measured_at"),
        profile.table.sort_values(["kind", "target", "key"], ignore_index=True).drop(
            columns="measured_at"
        ),
    )


finite = st.floats(0.0, 1.0, allow_nan=False)
positive = st.floats(1e-9, 1.0, allow_nan=False)  # every row kind may take time


def _target(kind: RowKind) -> str:
    """A target a row of ``kind`` may name: a device pair for copies."""
    return "cpu->opencl:0" if kind == RowKind.TRANSFER else "cpu@numpy"


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(RowKind)), st.text(min_size=1, max_size=12), positive, finite
        ),
        min_size=1,
        max_size=12,
        unique_by=lambda row: (row[0], row[1]),
    ),
    st.integers(0, 3),
)
def test_a_round_trip_is_exact(rows: list[tuple[RowKind, str, float, float]], passes: int) -> None:
    profile = Profile({"fingerprint": "round trip"})
    for kind, key, median, reference in rows:
        measured = Measurement(median, median / 2, median * 2, 0.0, median * 3, 7, "wall", passes)
        column = REFERENCE_COLUMNS.get(kind)
        references = {column: reference} if column else {}
        profile.record(kind, _target(kind), key, measured, "op type", 5, **references)
    loaded = Profile.from_text(profile.to_text())
    assert loaded.to_text().split("\n", 2)[2] == profile.to_text().split("\n", 2)[2]
    for kind, key, median, reference in rows:
        measurement = loaded.measurement(kind, _target(kind), key)
        assert measurement == profile.measurement(kind, _target(kind), key)
        assert measurement is not None and measurement.median_s == median
        assert measurement.passes == passes
        row = loaded.row(kind, _target(kind), key)
        assert row is not None
        for column in REFERENCE_COLUMNS.values():
            wanted = reference if column == REFERENCE_COLUMNS.get(kind) else math.nan
            assert row[column] == wanted or (math.isnan(row[column]) and math.isnan(wanted))


def test_a_schema_2_file_loads_without_shared_s_and_saves_as_the_current_schema(
    tmp_path: Path,
) -> None:
    graph = api.load(tiny_cnn())
    current = Profile.from_text(v1_profile_text(graph))
    _, meta, table = current.to_text().split("\n", 2)
    columns = pd.read_csv(io.StringIO(table), dtype=str, keep_default_na=False)
    assert "," in "".join(columns["key"])  # quoted keys survive the rewrite below
    without = columns.drop(columns=["shared_s", "partial", "check"]).to_csv(index=False)
    header = json.loads(meta.removeprefix("#"))
    del header["integrity"]  # version 2 had no checks
    older = "\n".join(["# autopart.profile 2", f"# {json.dumps(header)}", without])
    loaded = Profile.from_text(older)
    assert list(loaded.table.columns) == COLUMNS and loaded.table["shared_s"].isna().all()
    path = tmp_path / "p.csv"
    path.write_text(older)
    Profile.load(path).save(path)
    assert path.read_text().startswith(f"# autopart.profile {SCHEMA_VERSION}\n")
    assert SCHEMA_VERSION == 4


def test_a_reference_column_belongs_to_one_kind_and_kinds_are_checked() -> None:
    profile = Profile({"fingerprint": "test"})
    measured = Measurement(1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 3)
    with pytest.raises(ValueError, match="no producer_s"):
        profile.record(RowKind.CUT, "cpu@numpy", "k", measured, producer_s=1e-3)
    with pytest.raises(ValueError, match="no whole_s"):
        profile.record(RowKind.OP, "cpu@numpy", "k", measured, whole_s=1e-3)
    with pytest.raises(ValueError, match="not a valid RowKind"):
        profile.record("operator", "cpu@numpy", "k", measured)  # type: ignore[arg-type]
    profile.record("cut", "cpu@numpy", "k", measured, whole_s=5e-4)  # the value will do
    assert profile.has(RowKind.CUT, "cpu@numpy", "k") and profile.has("cut", "cpu@numpy", "k")
    assert profile.rows(RowKind.CUT)["whole_s"].tolist() == [5e-4]


def test_rows_with_passes_left_are_planned_again_and_complete_ones_are_not() -> None:
    graph = api.load(tiny_cnn())
    resolved = [resolve("cpu@numpy", discover())]
    profile = Profile({"fingerprint": "test"})
    for node in graph.nodes:
        done = 3 if node.op_type == "Conv" else 2  # the Relu and the Add: a pass left
        measured = Measurement(1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 9, "wall", done)
        profile.record(RowKind.OP, "cpu@numpy", op_signature(node, graph), measured)
    for key in ("wall", "timed"):
        profile.record(RowKind.LAUNCH, "cpu@numpy", key, Measurement(1e-5, 0, 0, 0, 0, 9))
    jobs, reused, _ = plan_jobs(graph, resolved, profile, passes=3)
    assert sorted((job.kind, job.nodes[0].op_type) for job in jobs if job.nodes) == [
        ("op", "Add"), ("op", "Relu"),
    ]  # fmt: skip
    assert [job.kind for job in jobs if not job.nodes] == ["launch"]  # 1 pass of 3
    assert reused == 1  # the Conv signature
    again = plan_jobs(graph, resolved, profile, passes=2)[0]  # a profiler taking 2 passes
    assert [job.kind for job in again] == ["launch"]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(1e-6, 10.0), min_size=1, max_size=40))
def test_a_measurement_of_samples_has_their_median_quartiles_and_extremes(
    samples: list[float],
) -> None:
    measured = Measurement.from_samples(samples)
    assert measured.median_s == pytest.approx(statistics.median(samples), rel=1e-12)
    assert measured.min_s == min(samples) and measured.max_s == max(samples)
    assert measured.q1_s <= measured.median_s <= measured.q3_s
    assert measured.runs == len(samples) and measured.passes == 1 and measured.timer == "wall"
