"""``autopart info MODEL``: a model's ops, parameters and FLOPs."""

from __future__ import annotations

import click
from rich.table import Table

from autopart import api
from autopart.cli.common import (
    console,
    freeze_option,
    input_shape_option,
    parse_freeze,
    parse_input_shapes,
    print_table,
    styled,
    user_errors,
)
from autopart.limits import format_size


@click.command("info")
@click.argument("model", metavar="MODEL")
@input_shape_option
@freeze_option
@user_errors
def info(model: str, input_shapes: tuple[str, ...], freeze: tuple[str, ...]) -> None:
    """Print MODEL's op histogram, parameter bytes and FLOP estimate."""
    summary = api.info(model, parse_input_shapes(input_shapes), parse_freeze(freeze))
    console.print(styled((summary.name, "bold"), f": {summary.nodes} nodes after simplification"))
    for kind, values in (("input", summary.inputs), ("output", summary.outputs)):
        for name, (dtype, shape) in values.items():
            console.print(f"  {kind} {name}: {dtype}{list(shape)}")
    console.print(f"  parameters: {format_size(summary.parameter_bytes)}")
    console.print(f"  FLOPs: {summary.flops / 1e9:.3f} G")
    if summary.dynamic:
        console.print(f"  dynamic: {summary.dynamic}")
    table = Table("op", "count", title="op histogram")
    for op, count in summary.op_histogram.items():
        table.add_row(op, str(count))
    print_table(table)
