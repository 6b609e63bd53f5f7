"""``autopart devices --cluster`` and ``autopart network``: the hosts of a Ray cluster."""

from __future__ import annotations

import math

import click
from rich.table import Table

from autopart import api
from autopart.cli.common import console, print_table, user_errors
from autopart.cluster.links import RUNS

CLUSTER_HELP = "a Ray cluster: local:N (N nodes started on this machine) or its address"


def print_cluster_devices(spec: str) -> None:
    """One table of every host's devices, then each host's targets and fingerprint."""
    described = api.cluster_devices(spec)
    table = Table("host", "address", "cpus", "device", "units", "codegens", "description",
                  title=f"devices of {spec}")  # fmt: skip
    for host in described:
        for row in host.devices:
            table.add_row(host.host.name, host.host.address, str(host.host.cpus), row["device"],
                          row["units"], row["codegens"], row["description"])  # fmt: skip
    print_table(table)
    for host in described:
        for line in host.left_out:
            console.print(f"{host.host.name}: left out: {line}")
        console.print(f"{host.host.name} targets: " + " ".join(
            f"{host.host.name}:{target}" for target in host.targets))  # fmt: skip
        console.print(f"{host.host.name} fingerprint: {host.fingerprint}")


@click.command("network")
@click.option("--cluster", "spec", required=True, metavar="local:N|ADDRESS", help=CLUSTER_HELP)
@click.option("--profiles", type=click.Path(file_okay=False), default=None,
              help="where the network model is saved (default: the profile directory)")  # fmt: skip
@click.option("--runs", type=click.IntRange(1, 1000), default=RUNS, show_default=True,
              help="timed transfers of each size")  # fmt: skip
@user_errors
def network_command(spec: str, profiles: str | None, runs: int) -> None:
    """Time transfers of 1 KB to 64 MB between every pair of hosts; fit and save each link."""
    model, path = api.measure_network(spec, profiles, runs=runs)
    table = Table("link", "bytes", "measured", "predicted", "error", title="transfers")
    for (a, b), link in sorted(model.links.items()):
        for nbytes, seconds, _ in link.measured:
            predicted = link.seconds(nbytes)
            error = f"{predicted / seconds - 1:+.0%}"
            table.add_row(f"{a} -> {b}", f"{nbytes:,}", f"{seconds * 1e3:.3f} ms",
                          f"{predicted * 1e3:.3f} ms", error)  # fmt: skip
    print_table(table)
    for (a, b), link in sorted(model.links.items()):
        regimes = "; ".join(
            ("beyond" if math.isinf(r.upto_bytes) else f"up to {r.upto_bytes:,.0f} bytes")
            + f": latency {r.latency_s * 1e6:.0f} us, {r.bytes_per_s / 1e9:.2f} GB/s"
            for r in link.regimes
        )
        console.print(f"{a} -> {b}: {regimes}; worst error {link.worst_error():.0%}")
    console.print(f"saved: {path}")
