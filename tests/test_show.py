"""`autopart show`: the explanation rows, the CLI, and the HTML page in a real headless browser."""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from autopart import api
from autopart.ir.graph import Graph
from autopart.plan.schema import (
    MeasuredRun,
    PartitionSpec,
    Plan,
    PlanError,
    Prediction,
    ScheduleStep,
)
from autopart.report.html import render_html, write_html
from autopart.report.svg import target_colours, tint
from autopart.report.tree import describe_saving, explain
from tests.opencl_here import needs_opencl
from tests.test_errors import assert_one_line_error, invoke

OPENCL, NUMPY, ORT = "opencl:0@opencl", "cpu@numpy", "cpu/0@onnxruntime"
pytestmark = needs_opencl  # its plans copy between the host and an OpenCL device
BROWSER_TIMEOUT_S = 60


def squeezenet_plan() -> tuple[Plan, Graph]:
    return api.make_plan("squeezenet", assign=[f"Conv={OPENCL}"], fallback=NUMPY)


def costs_for(plan: Plan) -> dict[str, dict[str, float]]:
    """Convs: OpenCL 10 µs·k, numpy dearer by 3 µs·k, ORT dearer still; but the first Conv is
    cheaper on numpy (a negative saving). Every other node runs on numpy only."""
    costs: dict[str, dict[str, float]] = {}
    for k, (name, target) in enumerate(plan.assignment.items(), start=1):
        own = 10e-6 * k
        if target == OPENCL:
            costs[name] = {OPENCL: own, NUMPY: own + 3e-6 * k, ORT: own + 5e-6 * k}
        else:
            costs[name] = {target: own}
    first_conv = plan.partitions[0].nodes[0]
    costs[first_conv][NUMPY] = costs[first_conv][OPENCL] - 2e-6
    return costs


def schedule_for(
    plan: Plan, costs: dict[str, dict[str, float]], scale: float
) -> list[ScheduleStep]:
    """Steps back to back in plan order on the executor's lanes."""
    entries, now = [], 0.0
    for step_id in plan.order:
        step = plan.step(step_id)
        if isinstance(step, PartitionSpec):
            lane = "opencl:0/*" if step.target == OPENCL else "cpu/*"
            seconds = sum(costs[n][step.target] for n in step.nodes)
        else:
            lane, seconds = f"copy:{step.src}->{step.dst}", 1e-6 + step.nbytes / 1e10
        start, end = now * scale, (now + seconds) * scale
        entries.append(ScheduleStep(step_id, lane, start, end))
        now += seconds
    return entries


def with_timings(plan: Plan) -> Plan:
    costs = costs_for(plan)
    predicted = schedule_for(plan, costs, 1.0)
    total = predicted[-1].end_s
    plan.predicted = Prediction(
        objective="latency",
        sequential_s=total,
        makespan_s=total,
        schedule=predicted,
        node_costs=costs,
        profile="0123456789abcdef",
    )
    plan.measured = MeasuredRun(
        median_s=total * 1.5, runs=7, schedule=schedule_for(plan, costs, 1.5)
    )
    return plan


@pytest.fixture(scope="module")
def timed() -> tuple[Plan, Graph]:
    plan, graph = squeezenet_plan()
    return with_timings(plan), graph


@pytest.fixture
def timed_path(tmp_path: Path, timed: tuple[Plan, Graph]) -> Path:
    path = tmp_path / "plan.json"
    timed[0].save(path)
    return path


# -- rows ----------------------------------------------------------------------------------
def test_rows_give_cost_next_best_and_saving(timed: tuple[Plan, Graph]) -> None:
    plan, graph = timed
    assert plan.predicted is not None
    costs = plan.predicted.node_costs
    rows = {node.name: node for part in explain(plan, graph).partitions for node in part.nodes}
    assert set(rows) == {node.name for node in graph.nodes}
    first_conv = plan.partitions[0].nodes[0]
    for name, row in rows.items():
        assert row.target == plan.assignment[name]
        assert row.op_type == graph.node(name).op_type
        assert row.cost_s == pytest.approx(costs[name][row.target])
        if row.target != OPENCL:
            assert (row.next_best, row.saving_s, describe_saving(row)) == (
                None,
                None,
                "only target",
            )
        elif name == first_conv:
            assert row.next_best == NUMPY and row.saving_s == pytest.approx(-2e-6)
            assert "slower than cpu@numpy" in describe_saving(row)
        else:
            assert row.next_best == NUMPY  # cheaper than ORT
            assert row.saving_s == pytest.approx(costs[name][NUMPY] - costs[name][OPENCL])
            assert row.saving_s > 0 and describe_saving(row).startswith("saves ")


def test_rows_give_partition_copy_and_total_times(timed: tuple[Plan, Graph]) -> None:
    plan, graph = timed
    explanation = explain(plan, graph)
    assert plan.predicted is not None and plan.measured is not None
    costs = plan.predicted.node_costs
    predicted = {e.step: e.end_s - e.start_s for e in plan.predicted.schedule}
    measured = {e.step: e.end_s - e.start_s for e in plan.measured.schedule}
    assert [row.id for row in explanation.partitions] == [p.id for p in plan.partitions]
    for row, spec in zip(explanation.partitions, plan.partitions, strict=True):
        assert (row.device, row.unit, row.codegen) == (
            ("opencl:0", "*", "opencl") if spec.target == OPENCL else ("cpu", "*", "numpy")
        )
        assert row.nodes_s == pytest.approx(sum(costs[n][spec.target] for n in spec.nodes))
        assert row.predicted_s == pytest.approx(predicted[spec.id])
        assert row.measured_s == pytest.approx(measured[spec.id])
    assert [(c.id, c.nbytes) for c in explanation.copies] == [(c.id, c.nbytes) for c in plan.copies]
    for row in explanation.copies:
        assert row.predicted_s == pytest.approx(predicted[row.id])
    assert explanation.sequential_s == pytest.approx(plan.predicted.sequential_s)
    assert explanation.measured_median_s == pytest.approx(plan.measured.median_s)
    assert explanation.measured_runs == 7 and explanation.missing == []


def test_measured_survives_save_and_old_plans_load(
    tmp_path: Path, timed: tuple[Plan, Graph]
) -> None:
    path = tmp_path / "plan.json"
    timed[0].save(path)
    assert Plan.load(path).measured == timed[0].measured
    document = json.loads(path.read_text())
    del document["measured"]
    assert Plan.from_dict(document).measured is None


def test_results_round_trip_typed(tmp_path: Path, timed: tuple[Plan, Graph]) -> None:
    plan = timed[0]
    path = tmp_path / "plan.json"
    plan.save(path)
    loaded = Plan.load(path)
    assert isinstance(loaded.predicted, Prediction) and isinstance(loaded.measured, MeasuredRun)
    assert loaded.predicted == plan.predicted and loaded.measured == plan.measured
    assert all(isinstance(step, ScheduleStep) for step in loaded.predicted.schedule)
    assert json.loads(path.read_text())["version"] == 2


def test_version_1_plans_convert(tmp_path: Path, timed: tuple[Plan, Graph]) -> None:
    document = timed[0].to_dict()
    document["version"] = 1
    document["predicted"]["written_by"] = "an older autopart"  # v1 kept free dicts
    document["measured"].pop("round_medians_s")
    old = Plan.from_dict(json.loads(json.dumps(document)))
    assert old.predicted == timed[0].predicted and old.measured == timed[0].measured
    document["version"] = 2
    with pytest.raises(PlanError, match=r"predicted has unknown key\(s\) written_by"):
        Plan.from_dict(document)


@pytest.mark.parametrize(
    ("section", "edit", "message"),
    [
        ("predicted", {"sequential_s": "fast"}, "predicted.sequential_s must be a finite number"),
        ("predicted", {"sequential_s": True}, "predicted.sequential_s must be a finite number"),
        ("predicted", {"objective": 3}, "predicted.objective must be a string"),
        ("predicted", {"schedule": [{"step": "p0", "lane": "cpu/*"}, 3]},
         "predicted.schedule[0].start_s must be a finite number"),
        ("predicted", {"schedule": [3]}, "predicted.schedule[0] must be an object"),
        ("predicted", {"schedule": [{"step": "p0", "lane": "x", "start_s": 2, "end_s": 1}]},
         "end_s 1.0 is before start_s 2.0"),
        ("predicted", {"node_costs": {"a": {"cpu@numpy": "1"}}},
         "predicted.node_costs.a.cpu@numpy must be a number"),
        ("predicted", {"ilp": {"gap": 0}}, "predicted.ilp.objective_s must be a number"),
        ("measured", {"runs": -1}, "measured.runs must be a non-negative integer"),
        ("measured", {"round_medians_s": [1, None]},
         "measured.round_medians_s[1] must be a finite number"),
        ("measured", {"schedule": {}}, "measured.schedule must be a list"),
        ("measured", [], "measured must be an object"),
    ],
)  # fmt: skip
def test_ill_typed_results_are_refused_in_one_line(
    timed: tuple[Plan, Graph], section: str, edit: object, message: str
) -> None:
    document = json.loads(json.dumps(timed[0].to_dict()))
    if isinstance(edit, dict):
        document[section].update(edit)
    else:
        document[section] = edit
    with pytest.raises(PlanError) as raised:
        Plan.from_dict(document)
    assert message in str(raised.value) and "\n" not in str(raised.value)


# -- CLI -----------------------------------------------------------------------------------
def test_show_prints_the_tree(timed_path: Path) -> None:
    code, output = invoke("show", str(timed_path))
    assert code == 0, output
    for fragment in ("cpu", "opencl:0", "@opencl", "@numpy", "* (whole device)", "p0 ", "p1 ",
                     "c0 ", "saves", "only target", "slower than", "predicted sequential",
                     "measured median", "copies (44"):  # fmt: skip
        assert fragment in output, fragment
    assert "missing" not in output


def test_show_says_what_is_missing(tmp_path: Path) -> None:
    plan, graph = squeezenet_plan()
    path, page = tmp_path / "bare.json", tmp_path / "bare.html"
    plan.save(path)
    code, output = invoke("show", str(path), "--html", str(page))
    assert code == 0, output
    assert "no prediction" in output and "no measurement" in output
    assert f"page written to {page}" in output
    text = page.read_text()
    assert "no predicted schedule in this plan" in text and "no measured schedule" in text

    plan.predicted = Prediction(schedule=[ScheduleStep("p0", "cpu/*", 0.0, 1e-3)])
    explanation = explain(plan, graph)
    assert "the prediction lacks objective, sequential_s, makespan_s, node_costs, profile" in (
        explanation.missing
    )
    assert all(node.cost_s is None for part in explanation.partitions for node in part.nodes)
    assert 'class="node"' in render_html(plan, graph)


def test_show_refuses_bad_plans_and_outputs(tmp_path: Path, timed_path: Path) -> None:
    assert_one_line_error(*invoke("show", str(tmp_path / "absent.json")), "plan file not found")
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text(timed_path.read_text()[:200])
    assert_one_line_error(*invoke("show", str(corrupt)), "not a readable plan")
    other = tmp_path / "other.json"
    document = json.loads(timed_path.read_text())
    document["model"]["source"] = "inception_v1"
    other.write_text(json.dumps(document))
    assert_one_line_error(*invoke("show", str(other)), str(other), "is damaged")
    del document["check"]  # an edit by hand, accepted as such
    other.write_text(json.dumps(document))
    assert_one_line_error(*invoke("show", str(other)), "not this one")
    assert_one_line_error(
        *invoke("show", str(timed_path), "--html", str(tmp_path)), "cannot write", str(tmp_path)
    )


# -- the page ------------------------------------------------------------------------------
class _Elements(HTMLParser):
    """Attributes of every element, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def with_class(self, name: str) -> list[dict[str, str]]:
        return [a for _, a in self.elements if name in a.get("class", "").split()]


def parse(page: str) -> _Elements:
    parser = _Elements()
    parser.feed(page)
    return parser


def test_page_is_self_contained_and_complete(tmp_path: Path, timed: tuple[Plan, Graph]) -> None:
    plan, graph = timed
    path = tmp_path / "out" / "plan.html"
    write_html(plan, graph, path)
    page = path.read_text(encoding="utf-8")
    assert "://" not in page and "<link" not in page and "src=" not in page
    elements = parse(page)
    nodes = elements.with_class("node")
    assert sorted(a["data-node"] for a in nodes) == sorted(n.name for n in graph.nodes)
    for attrs in nodes:
        assert attrs["data-target"] == plan.assignment[attrs["data-node"]]
    assert sorted(a["data-copy"] for a in elements.with_class("copy")) == sorted(
        c.id for c in plan.copies
    )
    bars = [a["data-step"] for a in elements.with_class("bar")]
    assert sorted(bars) == sorted(plan.order * 2)  # predicted and measured
    assert {a["data-partition"] for a in elements.with_class("partition")} == {
        p.id for p in plan.partitions
    }


def _chromium() -> str:
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
    )
    if found is None:
        reason = "chromium is not installed (apt-get install chromium): browser test skipped"
        print(reason)
        pytest.skip(reason)
    return found


def _browse(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile{len(list(tmp_path.glob('profile*')))}"
    command = [
        _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}", *args,
    ]  # fmt: skip
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium did not finish within {BROWSER_TIMEOUT_S} s: {command}")
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def test_page_in_a_headless_browser(tmp_path: Path, timed: tuple[Plan, Graph]) -> None:
    plan, graph = timed
    page = tmp_path / "plan.html"
    write_html(plan, graph, page)
    url = page.resolve().as_uri()

    dom = parse(_browse(tmp_path, "--dump-dom", url).stdout)
    body = next(attrs for tag, attrs in dom.elements if tag == "body")
    assert body.get("data-ready") == "yes", "the page's script did not run to its end"
    assert body.get("data-nodes") == str(len(graph.nodes))
    nodes = dom.with_class("node")
    assert {a["data-node"] for a in nodes} == {n.name for n in graph.nodes}
    assert all("data-tip" in a for a in nodes)  # the script turned titles into tooltips
    assert len(dom.with_class("copy")) == len(plan.copies)

    shot = tmp_path / "shot.png"
    _browse(tmp_path, f"--screenshot={shot}", "--window-size=1400,1000", url)
    matplotlib_image = pytest.importorskip("matplotlib.image")
    pixels = np.asarray(matplotlib_image.imread(shot))[..., :3]
    assert pixels.shape == (1000, 1400, 3)
    assert float(pixels.var()) > 0.01, "the screenshot is (nearly) blank"
    for target, colour in target_colours(plan.assignment.values()).items():
        fill = np.array([int(tint(colour, 0.55)[i : i + 2], 16) / 255 for i in (1, 3, 5)])
        painted = int((np.abs(pixels - fill).max(axis=-1) < 0.02).sum())
        assert painted > 2000, f"few pixels show {target}'s node colour: {painted}"
