"""``autopart devices``: this machine's devices, units, codegens, precisions and fingerprint."""

from __future__ import annotations

import click
from rich.table import Table

from autopart import api
from autopart.cli.common import console, print_table, user_errors
from autopart.targets.registry import codegen_names, get_codegen
from autopart.targets.resolve import available_targets


@click.command("devices")
@user_errors
def devices() -> None:
    """List devices, units, codegens with the precisions each offers here, and the fingerprint."""
    machine = api.devices()
    targets = available_targets(machine)
    table = Table("device", "kind", "units", "codegens", "description", title="devices")
    for device in machine.devices.values():
        here = [t for t in targets if t.device == device.name]
        codegens = [
            f"{name} ({'+'.join(dict.fromkeys(t.computes_in for t in here if t.codegen == name))})"
            for name in dict.fromkeys(str(t.codegen) for t in here)
        ]
        facts = device.describe()
        description = str(facts.get("device") or facts.get("processor") or "")
        units = ", ".join(f"{device.name}/{u.index}" for u in device.units) or "-"
        table.add_row(device.name, device.kind, units, ", ".join(codegens), description)
    print_table(table)
    for codegen in codegen_names():
        for name, why in get_codegen(codegen).left_out_devices():
            console.print(f"left out: the {codegen} device {name!r}: {why}")
    console.print("targets: " + " ".join(str(t) for t in targets))
    console.print(f"machine fingerprint: {machine.fingerprint()}")
