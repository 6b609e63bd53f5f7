"""What every command shares: the console, tables, option parsing and the error wrapper.

Errors a user can cause are printed as one line on stderr with exit status 2.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from autopart.errors import AutopartError

console = Console(highlight=False)
PIPED_MAX_WIDTH = 200  # a table printed to a pipe or log gets up to this many columns


def user_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a command so that an :class:`AutopartError` is one ``error:`` line and exit 2."""

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


def parse_input_shapes(specs: Sequence[str]) -> dict[str, list[int]]:
    """Parse ``--input-shape NAME=D1,D2,...`` options into a name -> dims mapping."""
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


input_shape_option = click.option(
    "--input-shape",
    "input_shapes",
    multiple=True,
    metavar="NAME=D1,D2,...",
    help="fix the shape of an input (symbolic dims default to 1)",
)


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


def format_bytes(count: float) -> str:
    """``count`` bytes in B, KiB, MiB or GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    return f"{count} B"


def split_list(values: Sequence[str]) -> list[str]:
    """Repeated and comma-separated option values as one list: ``("a,b", "c")`` -> a, b, c."""
    return [item.strip() for value in values for item in value.split(",") if item.strip()]
