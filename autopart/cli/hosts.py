"""``autopart devices --cluster`` and ``autopart network``: the hosts of a Ray cluster."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import wraps
from typing import Any, cast

import click
from rich.table import Table

from autopart import api
from autopart.cli.common import console, doing, print_peak_memory, print_table, user_errors
from autopart.cluster.links import RUNS
from autopart.costmodel.network import Regime
from autopart.errors import AutopartError
from autopart.search.constraints import parse_bytes
from autopart.tuning.hosts_tune import HostTuneReport
from autopart.tuning.options import TuneOptions

CLUSTER_HELP = "a Ray cluster: local:N (N nodes started on this machine) or its address"
_TUNE_CLUSTER_OPTIONS = (
    click.option("--cluster", "cluster_spec", default=None, metavar="local:N|ADDRESS",
                 help="plan across the hosts of a Ray cluster: each profiled on itself, stages "
                 "searched with the measured network, every candidate run there (--memory "
                 "HOST=SIZE caps a host's weights; --budget bounds each host's profile)"),
    click.option("--replan", is_flag=True, default=False,
                 help="with --cluster: if a host is lost, plan again on the hosts left"),
    click.option("--link", "links", multiple=True, metavar="A-B=BANDWIDTH,LATENCY",
                 help="with --cluster: plan for this link between hosts A and B (both ways, "
                 "e.g. host0-host1=1.25GB/s,200us) instead of the measured one; nothing runs"),
)  # fmt: skip


def tune_cluster_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--cluster``, ``--replan`` and ``--link`` to ``command``, as one ``cluster`` dict.

    The dict holds the :class:`~autopart.tuning.options.TuneOptions` fields they set
    (``cluster``, ``replan``, ``links``), and is empty without ``--cluster``; ``--replan``
    or ``--link`` without it is a usage error.
    """

    @wraps(command)
    def gathered(
        *args: Any, cluster_spec: str | None, replan: bool, links: tuple[str, ...], **kwargs: Any
    ) -> Any:
        if cluster_spec is None and (replan or links):
            raise click.UsageError("--replan and --link plan across hosts: give --cluster too")
        cluster = {} if cluster_spec is None else {"cluster": cluster_spec, "replan": replan,
                                                    "links": links}  # fmt: skip
        return command(*args, cluster=cluster, **kwargs)

    for option in reversed(_TUNE_CLUSTER_OPTIONS):
        gathered = option(gathered)
    return gathered


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
    """Time transfers of 1 KB to 64 MB between every pair of hosts; fit and save each link.

    Hosts sharing this machine are also timed streaming alone and together.
    """
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
            _sizes(link.regimes, index)
            + f": latency {r.latency_s * 1e6:.0f} us, {r.bytes_per_s / 1e9:.2f} GB/s"
            for index, r in enumerate(link.regimes)
        )
        console.print(f"{a} -> {b}: {regimes}; worst error {link.worst_error():.0%}")
    sharing = model.sharing
    if sharing is not None:
        points = ", ".join(f"{e:.2f} at {s * 1e3:.1f} ms" for s, e in sharing.measured)
        console.print(f"{sharing.describe()}; efficiency {points}")
    console.print(f"saved: {path}")


def _sizes(regimes: tuple[Regime, ...], index: int) -> str:
    """The sizes the ``index``-th of a link's ``regimes`` covers, in words."""
    if len(regimes) == 1:
        return "all sizes"
    if math.isinf(regimes[index].upto_bytes):
        return f"beyond {regimes[index - 1].upto_bytes:,.0f} bytes"
    return f"up to {regimes[index].upto_bytes:,.0f} bytes"


def parse_host_memory(memory: tuple[str, ...]) -> dict[str, int]:
    """``--memory HOST=SIZE`` (or ``'*=SIZE'``) with ``--cluster``: each host's weights' cap."""
    caps = {}
    for text in memory:
        host, sep, size = text.rpartition("=")
        if not sep or not host.strip():
            raise AutopartError(f"malformed --memory {text!r} with --cluster: expected "
                                "HOST=SIZE or '*=SIZE', e.g. host1=2GB")  # fmt: skip
        caps[host.strip()] = parse_bytes(size)
    return caps


def tune_on_cluster(model: str, options: TuneOptions) -> None:
    """``tune --cluster``: profile each host, search across them, run, and save the plan."""
    said = api.tune(model, options, progress=lambda _, __, ___, line: doing("tune", line))
    report = cast(HostTuneReport, said)  # a tune across hosts reports its own way
    spec, objective = options.cluster, options.search.objective
    print_table(candidates_table(report, spec))
    for host in report.profiles:
        shared = f" (shared with {host.shared_with})" if host.shared_with else ""
        console.print(f"{host.host}: profile {host.path}{shared}")
    console.print(f"network: {report.network}")
    for note in report.notes:
        console.print(f"note: {note}")
    how = "predicted" if report.predicted_only else "measured"
    console.print(f"chosen: {report.chosen.name} by {how} {objective}; plan: {report.plan_path}")
    print_peak_memory()


def candidates_table(report: HostTuneReport, spec: str) -> Table:
    """Every candidate across the hosts, the chosen one marked ``*``.

    Only the stages wrap when the table is wider than the output: the plan's name with
    its marker and every figure stay on the candidate's first line.
    """
    table = Table(title=f"across the hosts of {spec}")
    for header in ("plan", "kind", "stages", "predicted ms", "measured ms", "predicted /s",
                   "measured /s", "drop"):  # fmt: skip
        table.add_column(header, no_wrap=header != "stages")
    for c in report.candidates:
        stages = ", ".join(f"{h}:{t} [{a}:{b}]" for h, t, a, b in c.predicted.stages)
        table.add_row(
            c.name + (" *" if c is report.chosen else ""), c.predicted.kind, stages,
            f"{c.predicted.latency_s * 1e3:.2f}", _ms(c.latency_s),
            f"{c.predicted.rate_per_s:.1f}", "-" if c.rate_per_s is None else f"{c.rate_per_s:.1f}",
            "-" if c.error is None else f"{c.error:.1e}",
        )  # fmt: skip
    return table


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"
