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
from autopart.runtime.feeds import random_inputs
from autopart.zoo import zoo_names

console = Console(highlight=False)
MODEL_HELP = "a zoo model name (see `autopart zoo`) or a path to an .onnx file"


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
    console.print(table)


@main.command()
@click.argument("model", metavar="MODEL")
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
@_input_shape_option
@_user_errors
def run(
    model: str,
    inputs_path: str | None,
    out_path: str | None,
    repeat: int,
    warmup: int,
    seed: int,
    input_shapes: tuple[str, ...],
) -> None:
    """Run MODEL with every node on cpu@numpy; print outputs and the median latency."""
    graph = api.load(model, _parse_input_shapes(input_shapes))
    feeds = load_tensors(inputs_path) if inputs_path else random_inputs(graph, seed)
    result = api.run(graph, feeds, repeat=repeat, warmup=warmup)
    table = Table(
        "output", "dtype", "shape", "min", "max", "mean", title=f"{graph.name} on cpu@numpy"
    )
    for name, array in result.outputs.items():
        stats = (
            [f"{array.min():.4g}", f"{array.max():.4g}", f"{array.mean():.4g}"]
            if array.size and np.issubdtype(array.dtype, np.number)
            else ["", "", ""]
        )
        table.add_row(name, str(array.dtype), str(list(array.shape)), *stats)
    console.print(table)
    console.print(
        f"{len(graph.nodes)} nodes, {repeat} runs: median {result.median * 1e3:.2f} ms "
        f"(min {min(result.latencies) * 1e3:.2f} ms, max {max(result.latencies) * 1e3:.2f} ms)"
    )
    if out_path:
        save_tensors(out_path, result.outputs)
        console.print(f"outputs saved to {out_path}")
