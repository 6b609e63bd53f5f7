"""``autopart run MODEL_OR_PLAN``: run a model by placement rules, or a saved plan."""

from __future__ import annotations

import sys
from collections.abc import Mapping

import click
import numpy as np
from rich.table import Table

from autopart import api
from autopart.cli.common import (
    console,
    freeze_option,
    input_shape_option,
    parse_freeze,
    parse_input_shapes,
    print_peak_memory,
    print_table,
    telling_interrupts,
    user_errors,
)
from autopart.cli.run_check import check_samples, checking_metric
from autopart.io import check_writable, save_tensors
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.plan.schema import PartitionSpec, Plan
from autopart.runtime.plan_executor import PlanRunResult
from autopart.settings import COMMON
from autopart.targets import quant_ranges
from autopart.tuning.judge import dataset_shapes, task_judge
from autopart.tuning.oracle import errors_up_to_ties, oracle_outputs


@click.command("run")
@click.argument("model", metavar="MODEL_OR_PLAN")
@click.option(
    "--inputs",
    "inputs_path",
    type=click.Path(),
    help=".npz of arrays named after the model's inputs (default: seeded random); with "
    "several samples (a leading sample axis, or a folder of .npz files) int8 is calibrated "
    "on them all and the first is run; with --check, split as a tune splits them: the plan "
    "is checked on the validation samples, int8 calibrated on the rest",
)
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False),
    help="save the outputs to this .npz, under the model's output names",
)
@click.option(
    "--repeat", default=10, show_default=True, type=click.IntRange(min=1), help="timed runs"
)
@click.option(
    "--warmup", default=1, show_default=True, type=click.IntRange(min=0), help="untimed runs first"
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=click.IntRange(0, 2**32 - 1),
    help="seed of the random inputs",
)
@click.option(
    "--assign",
    multiple=True,
    metavar="SELECTOR=TARGET",
    help="place nodes: Conv=opencl:0@opencl, Conv#1=..., name:NODE=..., re:REGEX=..., idx:A-B=...",
)
@click.option(
    "--fallback",
    default=None,
    help="target of unassigned and unsupported nodes [default: the reference, on the host]",
)
@click.option(
    "--save-plan",
    type=click.Path(dir_okay=False),
    help="write the plan built from --assign to this JSON file",
)
@click.option(
    "--check",
    is_flag=True,
    help="compare the outputs with an independent oracle: onnxruntime on the whole model "
    "(the numpy reference where onnxruntime cannot run it, or the plan is onnxruntime alone)",
)
@click.option(
    "--sequential", is_flag=True, help="run steps one after another instead of concurrently"
)
@click.option(
    "--metric", "metric_name", default=None, metavar="agreement|topk:K|cosine|snr-db|max-rel",
    help="with --check: the metric to judge by (default: the one the plan was tuned under, "
    "else max-rel)",
)  # fmt: skip
@click.option(
    "--max-drop", type=float, default=None, metavar="D",
    help="with --check: the largest drop allowed (default: the plan's own budget)",
)  # fmt: skip
@click.option(
    "--validation-split", type=float, default=0.5, show_default=True,
    help="with --check and several --inputs: the share of them checked",
)  # fmt: skip
@click.option("--cluster", "cluster_spec", default=None, metavar="local:N|ADDRESS",
              help="run on the hosts of a Ray cluster: each run of nodes on its host "
              "(targets name hosts: host1:cpu@openvino)")  # fmt: skip
@click.option("--stream", type=click.IntRange(min=1), default=None, metavar="N",
              help="with --cluster: run N inputs as a pipelined stream; report the rate "
              "and each input's latency")  # fmt: skip
@input_shape_option
@freeze_option
@user_errors
def run(
    model: str,
    inputs_path: str | None,
    out_path: str | None,
    repeat: int,
    warmup: int,
    seed: int,
    assign: tuple[str, ...],
    fallback: str | None,
    save_plan: str | None,
    check: bool,
    sequential: bool,
    metric_name: str | None,
    max_drop: float | None,
    validation_split: float,
    cluster_spec: str | None,
    stream: int | None,
    input_shapes: tuple[str, ...],
    freeze: tuple[str, ...],
) -> None:
    """Run a model (every node on --fallback unless --assign places it) or a saved plan.

    MODEL_OR_PLAN is a zoo name, an .onnx file, or a plan .json written by --save-plan,
    `autopart tune` or by hand.
    """
    for path, what in ((save_plan, "plan file"), (out_path, "outputs file")):
        if path:
            check_writable(path, what)
    if stream is not None and cluster_spec is None:
        raise click.UsageError("--stream runs a pipeline across hosts: give --cluster too")
    if model.endswith(".json"):
        if assign or input_shapes or freeze:
            raise click.UsageError(
                "--assign, --input-shape and --freeze apply to models, not to plans"
            )
        plan, graph = api.load_plan(model)
    else:
        seen = dataset_shapes(inputs_path) if inputs_path else None
        plan, graph = api.make_plan(
            model, assign, fallback, parse_input_shapes(input_shapes), parse_freeze(freeze), seen
        )
    kept: list[str] = []
    with telling_interrupts(kept):
        if save_plan:
            plan.save(save_plan)
            kept.append(f"the plan was saved to {save_plan}")
        samples = (
            quant_ranges.load_samples(inputs_path, graph)
            if inputs_path
            else [random_inputs(graph, seed)]
        )
        feeds, judged = samples[0], None
        if check and (len(samples) > 1 or metric_name or max_drop is not None):
            metric, budget = checking_metric(plan, graph, metric_name, max_drop)
            judged = task_judge(graph, samples, metric, validation_split, seed)
            judged.real = bool(inputs_path)  # else a seeded random input, not the user's
            feeds = judged.samples[0]
        elif len(samples) > 1:
            calibration = quant_ranges.CalibrationSamples(tuple(samples), stand_in=False)
            quant_ranges.attach(graph, calibration)
        if stream is not None and cluster_spec is not None:
            _stream(plan, graph, samples, stream, cluster_spec)
            return
        result = api.run_plan(plan, graph, feeds, repeat=repeat, warmup=warmup,
                              concurrent=not sequential, cluster_spec=cluster_spec)  # fmt: skip
        _report(plan, graph, result, repeat)
        if save_plan:
            console.print(f"plan saved to {save_plan}")
        if out_path:
            save_tensors(out_path, result.outputs)
            kept.append(f"the outputs were saved to {out_path}")
            console.print(f"outputs saved to {out_path}")
        if judged is not None:
            if not check_samples(plan, graph, judged, budget, result.outputs):
                sys.exit(1)
        elif check and not _check(plan, graph, feeds, result):
            sys.exit(1)  # not a usage error (2): the run went as asked, its outputs differ


def _stream(
    plan: Plan, graph: Graph, samples: list[dict[str, np.ndarray]], count: int, spec: str
) -> None:
    """Run ``count`` inputs (the samples, cycled) through the plan on ``spec``; the figures."""
    inputs = [samples[i % len(samples)] for i in range(count)]
    result, stages = api.stream_plan(plan, graph, inputs, spec)
    for stage in stages:
        console.print(f"stage {stage.id} on {stage.host}: {len(stage.nodes)} nodes")
    latencies = np.array(result.latencies) * 1e3
    console.print(
        f"stream of {count} inputs on {len({s.host for s in stages})} host(s): "
        f"{result.rate:.2f} inputs/s once full ({count / result.seconds:.2f} over the whole "
        f"stream); latency median {np.median(latencies):.2f} ms "
        f"(min {latencies.min():.2f}, max {latencies.max():.2f})"
    )
    print_peak_memory()


def _report(plan: Plan, graph: Graph, result: PlanRunResult, repeat: int) -> None:
    """The plan's notes, the outputs, the steps and the latencies of a run."""
    for note in plan.notes:
        console.print(f"note: {note}")
    _print_outputs(graph.name, result.outputs)
    _print_steps(plan, result)
    console.print(
        f"{len(graph.nodes)} nodes in {len(plan.partitions)} partition(s) with "
        f"{len(plan.copies)} copies, {repeat} runs: median {result.median_s * 1e3:.2f} ms "
        f"(min {min(result.latencies) * 1e3:.2f} ms, max {max(result.latencies) * 1e3:.2f} ms)"
    )
    print_peak_memory()


def _check(
    plan: Plan, graph: Graph, feeds: Mapping[str, np.ndarray], result: PlanRunResult
) -> bool:
    """Print how the outputs compare with an independent oracle; whether they match it."""
    oracle, expected = oracle_outputs(graph, feeds, plan)
    errors, tied = errors_up_to_ties(result.outputs, expected, COMMON.check_tolerance)
    worst = max(errors.values(), default=0.0)
    matches = worst <= COMMON.check_tolerance  # an error of NaN (there should be none) mismatches
    verdict = "ok" if matches else "MISMATCH"
    reordered = "" if tied is None else f" once rows of tied {tied} are put in its order"
    console.print(f"check against {oracle}: max relative error {worst:.2e}{reordered} ({verdict})")
    return matches


def _print_outputs(title: str, outputs: dict[str, np.ndarray]) -> None:
    table = Table("output", "dtype", "shape", "min", "max", "mean", title=title)
    for name, array in outputs.items():
        stats = (
            [f"{array.min():.4g}", f"{array.max():.4g}", f"{array.mean():.4g}"]
            if array.size and np.issubdtype(array.dtype, np.number)
            else ["", "", ""]
        )
        table.add_row(name, str(array.dtype), str(list(array.shape)), *stats)
    print_table(table)


def _print_steps(plan: Plan, result: PlanRunResult) -> None:
    """Per-step timings, or busy time per target when there are many steps (none: nothing)."""
    if not result.steps:
        return
    if len(result.steps) > 40:
        busy: dict[str, float] = {}
        for timing in result.steps:
            step = plan.step(timing.step)
            key = step.target if isinstance(step, PartitionSpec) else "copies"
            busy[key] = busy.get(key, 0.0) + timing.end - timing.start
        table = Table("target", "busy ms", title="time per target (last run)")
        for key, seconds in sorted(busy.items()):
            table.add_row(key, f"{seconds * 1e3:.2f}")
    else:
        table = Table("step", "target", "nodes", "start ms", "ms", title="steps (last run)")
        for timing in result.steps:
            step = plan.step(timing.step)
            if isinstance(step, PartitionSpec):
                target, count = step.target, str(len(step.nodes))
            else:
                target, count = f"copy {step.value} {step.src}->{step.dst}", "-"
            duration = (timing.end - timing.start) * 1e3
            table.add_row(
                timing.step, target, count, f"{timing.start * 1e3:.2f}", f"{duration:.2f}"
            )
    print_table(table)
