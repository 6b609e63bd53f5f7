"""``autopart profile MODEL``: measure what this machine's saved profile lacks for MODEL."""

from __future__ import annotations

from pathlib import Path

import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from autopart import api
from autopart.cli.common import (
    console,
    doing,
    freeze_option,
    input_shape_option,
    parse_freeze,
    parse_input_shapes,
    print_peak_memory,
    print_table,
    progress_display,
    styled,
    telling_interrupts,
    user_errors,
)
from autopart.costmodel.calibration import CALIBRATION, DEFAULT_MODE, WindowFactor
from autopart.costmodel.from_profile import transfer_fits
from autopart.costmodel.measurements import RowKind
from autopart.profile.profiler import ProfileReport
from autopart.profile.store import Profile


@click.command("profile")
@click.argument("model", metavar="MODEL")
@click.option(
    "--targets",
    "targets",
    multiple=True,
    metavar="TARGET",
    help="target spec to measure, e.g. opencl:0/1@opencl (repeatable; default: all found)",
)
@click.option(
    "--profiles",
    "profiles",
    type=click.Path(file_okay=False),
    default=None,
    help="profile directory (default: $AUTOPART_PROFILES or ./profiles)",
)
@click.option("--budget", type=float, default=None, metavar="SECONDS", help="stop measuring after")
@click.option(
    "--refresh", is_flag=True, help="measure everything again; new rows replace the saved ones"
)
@click.option("--cluster", "cluster_spec", default=None, metavar="local:N|ADDRESS",
              help="profile every host of a Ray cluster, each on itself, one at a time; "
              "each host's profile is saved here under its fingerprint")  # fmt: skip
@input_shape_option
@freeze_option
@user_errors
def profile_command(
    model: str,
    targets: tuple[str, ...],
    profiles: str | None,
    budget: float | None,
    refresh: bool,
    cluster_spec: str | None,
    input_shapes: tuple[str, ...],
    freeze: tuple[str, ...],
) -> None:
    """Measure op, launch and copy costs of MODEL on every target; reuse what is saved."""
    targets = tuple(t for spec in targets for t in spec.split(",") if t.strip())
    if cluster_spec is not None:
        if refresh:
            raise click.UsageError("--refresh is for this machine's profile, not --cluster")
        _profile_hosts(model, cluster_spec, targets, profiles, budget, input_shapes, freeze)
        return
    columns = (
        TextColumn("{task.description:<40}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    kept: list[str] = []  # an interrupt while the report prints: the profile is whole
    with telling_interrupts(kept):
        with progress_display(*columns) as bar:
            task = bar.add_task("preparing", total=None, stage="profile")

            def progress(done: int, total: int, label: str) -> None:
                doing("profile", label)
                bar.update(task, completed=done, total=total, description=label[:40])

            report, saved, path = api.profile(
                model, targets or None, profiles, budget, progress,
                parse_input_shapes(input_shapes), refresh=refresh, freeze=parse_freeze(freeze),
            )  # fmt: skip
        kept.append(f"kept {len(saved.table)} profile rows in {path}")
        _print_report(model, report, saved, path)


def _profile_hosts(
    model: str,
    spec: str,
    targets: tuple[str, ...],
    profiles: str | None,
    budget: float | None,
    input_shapes: tuple[str, ...],
    freeze: tuple[str, ...],
) -> None:
    """``profile --cluster``: each host's profile, and a table of what each measured."""
    found = api.profile_hosts(
        model, spec, targets or None, profiles, budget, parse_input_shapes(input_shapes),
        parse_freeze(freeze), announce=lambda line: doing("profile", line),
    )  # fmt: skip
    table = Table("host", "fingerprint", "new", "reused", "missing", "seconds", "profile",
                  title=f"profiles of {model} on {spec}")  # fmt: skip
    for host in found:
        where = str(host.path) if host.shared_with is None else f"shared with {host.shared_with}"
        table.add_row(host.host, host.fingerprint, str(host.new), str(host.reused),
                      str(host.missing), f"{host.elapsed_s:.1f}", where)  # fmt: skip
    print_table(table)
    for host in found:
        for note in host.notes if host.shared_with is None else ():
            console.print(styled(("note:", "yellow"), f" {host.host}: {note}"))
    print_peak_memory()


def _print_report(model: str, report: ProfileReport, saved: Profile, path: Path) -> None:
    """What ``profile`` measured and reused, its notes, and the saved profile's summary."""
    console.print(
        styled(
            (model, "bold"),
            f" on {len(report.targets)} targets: {report.new} new measurements, "
            f"{report.reused} reused, {report.unsupported} unsupported op signatures, "
            f"{report.elapsed_s:.1f} s",
        )
    )
    for note in report.notes:
        console.print(styled(("note:", "yellow"), f" {note}"))
    if report.resumed:
        console.print(f"{report.resumed} measurements took only the passes they lacked")
    if report.missing:
        missing = f"budget spent: {report.missing} measurements still missing; run again to resume"
        console.print(styled((missing, "yellow")))
    _print_profile_summary(saved, report.entries)
    _print_calibrations(report.calibrations)
    console.print(f"profile: {path}")
    print_peak_memory()


def _print_calibrations(calibrations: list[WindowFactor]) -> None:
    table = Table(
        "target", "windows", "op sum vs measured", "factor", "search uses",
        title="subgraph calibration",
        caption=f"the search scales op costs only where windows agree on an op sum off by over "
        f"{CALIBRATION.gross_error:.0%}",
    )  # fmt: skip
    for calibration in calibrations:
        windows = f"{calibration.windows} ({calibration.source})" if calibration.windows else "-"
        table.add_row(
            calibration.target,
            windows,
            f"{calibration.op_sum_error:+.1%}" if calibration.windows else "-",
            f"{calibration.factor:.3f}"
            if calibration.applied or not calibration.windows
            else "1 (windows disagree)",
            f"{calibration.factor_for(DEFAULT_MODE):.3f}",
        )
    print_table(table)


def _print_profile_summary(
    profile: Profile, entries: dict[str, tuple[float, float, float]]
) -> None:
    launches = Table(
        "target", "launch", "cut", "cold entry", "alone saves", "ops measured", title="targets",
        caption="cut, cold entry and what a plan's only partition saves per node: this "
        "model's windows (the launch probe is back to back)",
    )  # fmt: skip
    for target in sorted(set(profile.rows(RowKind.LAUNCH)["target"])):
        wall = profile.measurement(RowKind.LAUNCH, target, "wall")
        count = len(profile.rows(RowKind.OP, target))
        cut = cold = alone = "-"
        if target in entries:
            cut_s, cold_s, alone_s = entries[target]
            cut, cold = f"{cut_s * 1e3:.2f} ms", f"{cold_s * 1e3:.2f} ms"
            alone = f"{alone_s * 1e6:.1f} µs" if len(profile.rows(RowKind.ALONE, target)) else "-"
        launch = f"{wall.median_s * 1e6:.1f} µs" if wall else "-"
        launches.add_row(target, launch, cut, cold, alone, str(count))
    print_table(launches)
    fits = transfer_fits(profile)
    if fits:
        table = Table("copy", "latency", "bandwidth", "max error", title="transfer fits")
        for (src, dst), fit in sorted(fits.items()):
            table.add_row(
                f"{src} -> {dst}",
                f"{fit.model.latency_s * 1e6:.1f} µs",
                _bandwidth(fit.model.bandwidth_bps),
                f"{fit.max_relative_error:.1%}",
            )
        print_table(table)


def _bandwidth(bytes_per_second: float) -> str:
    """GB/s, or "latency only" where the fit found no per-byte cost for small copies."""
    return "latency only" if bytes_per_second >= 1e14 else f"{bytes_per_second / 1e9:.2f} GB/s"
