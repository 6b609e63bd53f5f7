"""Helpers shared by the research experiments (``experiments/exp_*.py``).

Costs come from this machine's profile store (measuring only what it lacks), plans are
measured with :func:`autopart.tuning.verify.measure_plans` (interleaved rounds, outputs
checked against the numpy reference), and every experiment writes its figures as a CSV
(pandas) under ``experiments/results/``; those that plot them also write a PNG
(matplotlib's Agg canvas, no display needed).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autopart import api
from autopart.costmodel import costs_from_profile
from autopart.costmodel.costs import Costs
from autopart.host_memory import status_bytes
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.plan.schema import Plan
from autopart.search.baselines import default_fallback
from autopart.targets.resolve import available_targets
from autopart.tuning.verify import Measured, Runner, measure_plans

RESULTS = Path(__file__).parent / "results"
console = Console(width=200)
TARGET_COLOURS = {  # darker = whole device
    "cpu@numpy": "0.15",
    "cpu@onnxruntime": "0.4",
    "cpu/0@onnxruntime": "0.6",
    "cpu/1@onnxruntime": "0.8",
    "opencl:0@opencl": "#8c510a",
    "opencl:0/0@opencl": "#bf812d",
    "opencl:0/1@opencl": "#dfc27d",
}


def resident_gib() -> float:
    """This process's resident set now, in GiB (NaN where the kernel does not say)."""
    resident = status_bytes("VmRSS")
    return float("nan") if resident is None else resident / 2**30


def zoo_arguments(
    description: str, models: Sequence[str], rounds: int, seed: bool = True
) -> argparse.ArgumentParser:
    """A parser with the options the zoo experiments share.

    ``--models`` (default ``models``), ``--rounds`` (default ``rounds``), ``--profiles``
    (the profile store; default: the saved one) and, with ``seed``, ``--seed`` (default 0).
    The caller adds its own options.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--models", nargs="*", default=list(models))
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--profiles", default=None, help="profile store (default: saved)")
    if seed:
        parser.add_argument("--seed", type=int, default=0)
    return parser


def model_costs(model: str, profiles: str | Path | None = None) -> tuple[Graph, Costs]:
    """``model``'s graph and its costs on every target here, from the profile store.

    ``profiles`` is the store directory (default: the machine's saved profiles,
    ``$AUTOPART_PROFILES`` or ``profiles/``); whatever it lacks is measured first.
    """
    targets = [str(t) for t in available_targets()]
    graph = api.load(model)
    report, profile, _ = api.profile(graph, targets, profiles)
    console.print(
        f"[dim]{model}: profile {report.new} new, {report.reused} reused measurements[/dim]"
    )
    return graph, costs_from_profile(graph, profile, targets)


def random_assignment(
    costs: Costs, rng: np.random.Generator, max_chunks: int = 8
) -> dict[str, VirtualDevice]:
    """A random but sensible assignment: contiguous chunks of the topological order.

    The node order is cut into 2 to ``max_chunks`` chunks at random places; each chunk goes
    to a random target, and a node that target cannot run goes to the default fallback (or,
    failing that, its first supported target).
    """
    nodes = costs.graph.nodes
    fallback = default_fallback(costs)
    count = int(rng.integers(2, max_chunks + 1))
    cuts = sorted(int(c) for c in rng.choice(np.arange(1, len(nodes)), count - 1, replace=False))
    assignment: dict[str, VirtualDevice] = {}
    for chunk in np.split(np.arange(len(nodes)), cuts):
        target = costs.targets[int(rng.integers(len(costs.targets)))]
        for index in chunk:
            node = nodes[int(index)]
            supported = costs.supported(node)
            if target in supported:
                assignment[node.name] = target
            else:
                assignment[node.name] = fallback if fallback in supported else supported[0]
    return assignment


def distinct_plans(plans: Mapping[str, Plan]) -> tuple[dict[str, Plan], dict[str, str]]:
    """The plans with distinct assignments, and each name's twin among them (itself if kept)."""
    kept: dict[str, Plan] = {}
    seen: dict[tuple[tuple[str, str], ...], str] = {}
    twins: dict[str, str] = {}
    for name, plan in plans.items():
        key = tuple(sorted(plan.assignment.items()))
        twins[name] = seen.setdefault(key, name)
        if twins[name] == name:
            kept[name] = plan
    return kept, twins


def measure(
    graph: Graph,
    plans: Mapping[str, Plan],
    rounds: int,
    warmup: int = 2,
    peers: Mapping[str, Runner] | None = None,
) -> dict[str, Measured]:
    """Measure every distinct plan in interleaved rounds; twins share their twin's result.

    Inputs are seeded random (seed 0); every plan's outputs are checked against the numpy
    reference on its first run. ``peers`` (runners such as onnxruntime alone) run in the
    same rounds and are returned under their names.
    """
    kept, twins = distinct_plans(plans)
    twins.update({name: name for name in peers or {}})
    with Progress(
        TextColumn("{task.description:<40}"), BarColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        task = bar.add_task(f"measuring {len(kept)} plans", total=None)

        def progress(done: int, total: int, label: str) -> None:
            """Advance the progress bar to ``done`` of ``total``."""
            bar.update(task, completed=done, total=total, description=label[:40])

        measured = measure_plans(
            graph,
            kept,
            random_inputs(graph, 0),
            rounds,
            warmup,
            progress=progress,
            peers=dict(peers or {}),
        )
    return {name: measured[twin] for name, twin in twins.items() if twin in measured}


def median_ms(step: Callable[[], object], repeat: int, warmup: int = 2) -> float:
    """The median wall time of ``repeat`` calls of ``step`` after ``warmup`` untimed ones, in ms."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def ort_session(model: bytes, threads: int | None = None) -> Any:
    """An onnxruntime CPU session of ``model``: its default threads, or ``threads`` intra-op."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def model_and_feeds(name: str) -> tuple[bytes, dict[str, np.ndarray]]:
    """A zoo model (or path) as autopart imports it, serialised, and its seeded inputs."""
    from autopart.ir.onnx_export import to_onnx

    graph = api.load(name)
    return to_onnx(graph).SerializeToString(), dict(random_inputs(graph, seed=0))


def show(title: str, frame: pd.DataFrame, digits: int = 3) -> None:
    """Print ``frame`` as a rich table, floats rounded to ``digits`` decimals."""
    table = Table(*(str(c) for c in frame.columns), title=title)
    for row in frame.itertuples(index=False):
        table.add_row(*(f"{v:.{digits}f}" if isinstance(v, float) else str(v) for v in row))
    console.print(table)


def write_csv(frame: pd.DataFrame, name: str) -> Path:
    """Write ``frame`` to ``experiments/results/<name>`` and return the path."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / name
    frame.to_csv(path, index=False)
    return path


def new_figure(width: float = 10.0, height: float = 5.0) -> Figure:
    """A matplotlib figure drawn by the Agg canvas (no display or pyplot state)."""
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def plain_log(axes: Axes, *which: str) -> None:
    """Label log-scaled ``which`` axes ("x", "y") with plain numbers: decades, 2s and 5s."""
    major = FuncFormatter(lambda value, _: f"{value:g}")
    minor = FuncFormatter(lambda value, _: f"{value:g}" if f"{value:e}"[0] in "25" else "")
    for name in which:
        axis = axes.xaxis if name == "x" else axes.yaxis
        axis.set_major_formatter(major)
        axis.set_minor_formatter(minor)


def target_colour(target: str) -> str:
    """The plots' colour of a single target: greys on the host, browns on OpenCL."""
    return TARGET_COLOURS.get(target, "0.5")


def save_figure(figure: Figure, name: str) -> Path:
    """Save ``figure`` as ``experiments/results/<name>`` (150 dpi) and return the path."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / name
    figure.savefig(path, dpi=150)
    return path


def one_line(error: BaseException) -> str:
    """The error as one line: its type and its message's last line."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[-1] if lines else ''}"[:300]
