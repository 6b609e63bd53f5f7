"""The ``autopart`` command line. Every command mirrors a function of :mod:`autopart.api`.

Errors a user can cause are printed as one line on stderr with exit status 2.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.table import Table

from autopart import api
from autopart.errors import AutopartError
from autopart.io import load_tensors, save_tensors
from autopart.plan.schema import PartitionSpec, Plan
from autopart.runtime.feeds import random_inputs
from autopart.runtime.plan_executor import PlanRunResult
from autopart.targets.resolve import available_targets
from autopart.zoo import zoo_names

console = Console(highlight=False)
PIPED_MAX_WIDTH = 200  # a table printed to a pipe or log gets up to this many columns
CHECK_TOLERANCE = 1e-3  # max relative error accepted by --check


def _user_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except AutopartError as error:
            click.echo(f"error: {error}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper


def _parse_input_shapes(specs: Sequence[str]) -> dict[str, list[int]]:
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [int(d) for d in dims.split(",") if d.strip()]
        except ValueError:
            raise click.BadParameter(
                f"{spec!r} is not NAME=D1,D2,...", param_hint="--input-shape"
            ) from None
    return shapes


_input_shape_option = click.option(
    "--input-shape",
    "input_shapes",
    multiple=True,
    metavar="NAME=D1,D2,...",
    help="fix the shape of an input (symbolic dims default to 1)",
)


@click.group()
@click.version_option(package_name="autopart")
def main() -> None:
    """autopart: measure, partition and run ONNX models across heterogeneous compute."""


@main.command()
def zoo() -> None:
    """List the bundled models."""
    for name in zoo_names():
        console.print(name)


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
    wide = Console(file=console.file, width=max(console.width, natural.maximum), highlight=False)
    wide.print(table)


def _format_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    return f"{count} B"


@main.command()
@click.argument("model", metavar="MODEL")
@_input_shape_option
@_user_errors
def info(model: str, input_shapes: tuple[str, ...]) -> None:
    """Print MODEL's op histogram, parameter bytes and FLOP estimate."""
    summary = api.info(model, _parse_input_shapes(input_shapes))
    console.print(f"[bold]{summary.name}[/bold]: {summary.nodes} nodes after simplification")
    for kind, values in (("input", summary.inputs), ("output", summary.outputs)):
        for name, (dtype, shape) in values.items():
            console.print(f"  {kind} {name}: {dtype}{list(shape)}")
    console.print(f"  parameters: {_format_bytes(summary.parameter_bytes)}")
    console.print(f"  FLOPs: {summary.flops / 1e9:.3f} G")
    table = Table("op", "count", title="op histogram")
    for op, count in summary.op_histogram.items():
        table.add_row(op, str(count))
    print_table(table)


@main.command()
@_user_errors
def devices() -> None:
    """List devices, their units and codegens, and this machine's fingerprint."""
    machine = api.devices()
    targets = available_targets(machine)
    table = Table("device", "kind", "units", "codegens", "description", title="devices")
    for device in machine.devices.values():
        codegens = sorted({str(t.codegen) for t in targets if t.device == device.name})
        facts = device.describe()
        description = str(facts.get("device") or facts.get("processor") or "")
        units = ", ".join(f"{device.name}/{u.index}" for u in device.units) or "-"
        table.add_row(device.name, device.kind, units, ", ".join(codegens), description)
    print_table(table)
    console.print("targets: " + " ".join(str(t) for t in targets))
    console.print(f"machine fingerprint: {machine.fingerprint()}")


@main.command()
@click.argument("model", metavar="MODEL_OR_PLAN")
@click.option(
    "--inputs",
    "inputs_path",
    type=click.Path(dir_okay=False),
    help=".npz of arrays named after the model's inputs (default: seeded random)",
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
@click.option("--seed", default=0, show_default=True, help="seed of the random inputs")
@click.option(
    "--assign",
    multiple=True,
    metavar="SELECTOR=TARGET",
    help="place nodes: Conv=opencl:0@opencl, Conv#1=..., name:NODE=..., re:REGEX=..., idx:A-B=...",
)
@click.option(
    "--fallback",
    default="cpu@numpy",
    show_default=True,
    help="target of unassigned and unsupported nodes",
)
@click.option(
    "--save-plan",
    type=click.Path(dir_okay=False),
    help="write the plan built from --assign to this JSON file",
)
@click.option("--check", is_flag=True, help="compare the outputs with the numpy reference")
@click.option(
    "--sequential", is_flag=True, help="run steps one after another instead of concurrently"
)
@_input_shape_option
@_user_errors
def run(
    model: str,
    inputs_path: str | None,
    out_path: str | None,
    repeat: int,
    warmup: int,
    seed: int,
    assign: tuple[str, ...],
    fallback: str,
    save_plan: str | None,
    check: bool,
    sequential: bool,
    input_shapes: tuple[str, ...],
) -> None:
    """Run a model (every node on --fallback unless --assign places it) or a saved plan.

    MODEL_OR_PLAN is a zoo name, an .onnx file, or a plan .json written by --save-plan,
    `autopart tune` or by hand.
    """
    if model.endswith(".json"):
        if assign or input_shapes:
            raise click.UsageError("--assign and --input-shape apply to models, not to plans")
        plan, graph = api.load_plan(model)
    else:
        plan, graph = api.make_plan(model, assign, fallback, _parse_input_shapes(input_shapes))
    if save_plan:
        plan.save(save_plan)
    feeds = load_tensors(inputs_path) if inputs_path else random_inputs(graph, seed)
    result = api.run_plan(
        plan, graph, feeds, repeat=repeat, warmup=warmup, concurrent=not sequential
    )
    for note in plan.notes:
        console.print(f"note: {note}")
    _print_outputs(graph.name, result.outputs)
    _print_steps(plan, result)
    console.print(
        f"{len(graph.nodes)} nodes in {len(plan.partitions)} partition(s) with "
        f"{len(plan.copies)} copies, {repeat} runs: median {result.median * 1e3:.2f} ms "
        f"(min {min(result.latencies) * 1e3:.2f} ms, max {max(result.latencies) * 1e3:.2f} ms)"
    )
    if save_plan:
        console.print(f"plan saved to {save_plan}")
    if out_path:
        save_tensors(out_path, result.outputs)
        console.print(f"outputs saved to {out_path}")
    if check:
        errors = api.check_outputs(graph, feeds, result.outputs)
        worst = max(errors.values(), default=0.0)
        verdict = "ok" if worst <= CHECK_TOLERANCE else "MISMATCH"
        console.print(f"check against numpy reference: max relative error {worst:.2e} ({verdict})")
        if worst > CHECK_TOLERANCE:
            sys.exit(1)


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
    """Per-step timings, or busy time per target when there are many steps."""
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


from autopart.profile.command import profile_command  # noqa: E402 - needs the helpers above

main.add_command(profile_command)

from autopart.tuning.command import bench_command, tune_command  # noqa: E402

main.add_command(tune_command)
main.add_command(bench_command)

from autopart.report.cli_show import show_command  # noqa: E402

main.add_command(show_command)
