"""The ``autopart`` command line: one module per command, each mirroring :mod:`autopart.api`.

This package is the only place that imports click and rich. Errors a user can cause are
printed as one line on stderr with exit status 2 (:func:`autopart.cli.common.user_errors`).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from autopart.cli.bench import bench_command
from autopart.cli.common import one_line, print_table
from autopart.cli.devices import devices
from autopart.cli.hosts import network_command
from autopart.cli.info import info
from autopart.cli.profile import profile_command
from autopart.cli.run import run
from autopart.cli.show import show_command
from autopart.cli.tune import tune_command
from autopart.cli.zoo import zoo
from autopart.interrupts import exit_status, interrupted_line

__all__ = ["main", "print_table"]


class OneLineErrors(click.Group):
    """A command group whose usage errors are one ``error:`` line and exit status 2.

    click prints a usage error as a usage block, a hint and the message (4-5 lines); every
    other error a user can cause in autopart is one line, so these are too.
    """

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        """Run the command line; in standalone mode exit with its status."""
        try:
            result = super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as error:
            command = error.ctx.command_path if error.ctx is not None else "autopart"
            message = one_line(error.format_message().rstrip("."))
            click.echo(f"error: {message} (see {command} --help)", err=True)
            sys.exit(2)
        except click.ClickException as error:
            click.echo(f"error: {one_line(error.format_message())}", err=True)
            sys.exit(error.exit_code)
        except click.Abort as abort:  # an interrupt while click parsed, or a prompt cut short
            interrupt = abort.__cause__ or KeyboardInterrupt()
            click.echo(one_line(interrupted_line(interrupt)), err=True)
            sys.exit(exit_status(interrupt))
        if not standalone_mode:
            return result
        sys.exit(result if isinstance(result, int) else 0)


@click.group(cls=OneLineErrors)
@click.version_option(package_name="autopart")
def main() -> None:
    """autopart: measure, partition and run ONNX models across heterogeneous compute."""


for command in (
    zoo,
    info,
    devices,
    network_command,
    run,
    profile_command,
    tune_command,
    bench_command,
    show_command,
):
    main.add_command(command)
