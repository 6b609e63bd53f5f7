"""``autopart zoo``: list the bundled models."""

from __future__ import annotations

import click

from autopart.cli.common import console
from autopart.zoo import zoo_names


@click.command("zoo")
def zoo() -> None:
    """List the bundled models."""
    for name in zoo_names():
        console.print(name)
