"""The ``autopart`` command line: one module per command, each mirroring :mod:`autopart.api`.

This package is the only place that imports click and rich. Errors a user can cause are
printed as one line on stderr with exit status 2 (:func:`autopart.cli.common.user_errors`).
"""

from __future__ import annotations

import click

from autopart.cli.bench import bench_command
from autopart.cli.common import print_table
from autopart.cli.devices import devices
from autopart.cli.info import info
from autopart.cli.profile import profile_command
from autopart.cli.run import run
from autopart.cli.show import show_command
from autopart.cli.tune import tune_command
from autopart.cli.zoo import zoo

__all__ = ["main", "print_table"]


@click.group()
@click.version_option(package_name="autopart")
def main() -> None:
    """autopart: measure, partition and run ONNX models across heterogeneous compute."""


for command in (
    zoo,
    info,
    devices,
    run,
    profile_command,
    tune_command,
    bench_command,
    show_command,
):
    main.add_command(command)
