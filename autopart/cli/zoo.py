"""``autopart zoo``: list the bundled models."""

from __future__ import annotations

import click

from autopart.cli.common import console, user_errors
from autopart.zoo import zoo_names


@click.command("zoo")
@user_errors
def zoo() -> None:
    """List the bundled models."""
    for name in zoo_names():
        console.print(name)
