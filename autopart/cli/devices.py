"""``autopart devices``: this machine's devices, units, codegens, precisions and fingerprint."""

from __future__ import annotations

import click
from rich.table import Table

from autopart import api
from autopart.cli.common import console, print_table, user_errors
from autopart.cli.hosts import CLUSTER_HELP, print_cluster_devices
from autopart.targets.registry import codegen_names, get_codegen
from autopart.targets.resolve import available_targets, device_rows


@click.command("devices")
@click.option("--cluster", "spec", default=None, metavar="local:N|ADDRESS", help=CLUSTER_HELP)
@user_errors
def devices(spec: str | None) -> None:
    """List devices, units, codegens with the precisions each offers here, and the fingerprint.

    With --cluster, those of every host of a Ray cluster, each found on the host itself.
    """
    if spec is not None:
        print_cluster_devices(spec)
        return
    machine = api.devices()
    table = Table("device", "kind", "units", "codegens", "description", title="devices")
    for row in device_rows(machine):
        table.add_row(row["device"], row["kind"], row["units"], row["codegens"], row["description"])
    print_table(table)
    for codegen in codegen_names():
        for name, why in get_codegen(codegen).left_out_devices():
            console.print(f"left out: the {codegen} device {name!r}: {why}")
    console.print("targets: " + " ".join(str(t) for t in available_targets(machine)))
    console.print(f"machine fingerprint: {machine.fingerprint()}")
