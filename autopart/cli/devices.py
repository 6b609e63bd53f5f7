"""``autopart devices``: this machine's devices, units, codegens and fingerprint."""

from __future__ import annotations

import click
from rich.table import Table

from autopart import api
from autopart.cli.common import console, print_table, user_errors
from autopart.targets.codegen import get_codegen
from autopart.targets.resolve import available_targets


@click.command("devices")
@user_errors
def devices() -> None:
    """List devices, their units and codegens, and this machine's fingerprint."""
    machine = api.devices()
    targets = available_targets(machine)
    table = Table("device", "kind", "units", "codegens", "description", title="devices")
    for device in machine.devices.values():
        codegens = sorted({_label(str(t.codegen)) for t in targets if t.device == device.name})
        facts = device.describe()
        description = str(facts.get("device") or facts.get("processor") or "")
        units = ", ".join(f"{device.name}/{u.index}" for u in device.units) or "-"
        table.add_row(device.name, device.kind, units, ", ".join(codegens), description)
    print_table(table)
    console.print("targets: " + " ".join(str(t) for t in targets))
    console.print(f"machine fingerprint: {machine.fingerprint()}")


def _label(codegen: str) -> str:
    """A codegen's name, with its precision when it declares one (``openvino (f32)``)."""
    precision = getattr(get_codegen(codegen), "precision", None)
    return f"{codegen} ({precision})" if precision else codegen
