"""``autopart tune MODEL``: the whole journey from a model to a verified, saved plan."""

from __future__ import annotations

from typing import Any

import click
from rich.progress import (
    BarColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from autopart.cli.common import (
    command_started,
    console,
    doing,
    freeze_option,
    input_shape_option,
    memory_limit_option,
    parse_freeze,
    parse_input_shapes,
    parse_memory_limit,
    precision_option,
    print_peak_memory,
    print_table,
    progress_display,
    split_list,
    styled,
    task_options,
    tolerance_option,
    user_errors,
)
from autopart.cli.hosts import parse_host_memory, tune_cluster_options, tune_on_cluster
from autopart.limits import format_size
from autopart.search.constraints import Constraints
from autopart.search.options import Method, Objective, SearchOptions
from autopart.tuning.metrics import AGREEMENT, MAX_REL, TOPK, Metric
from autopart.tuning.options import TuneOptions
from autopart.tuning.plan_rows import PlanRow, plan_precisions
from autopart.tuning.tune_report import TuneReport
from autopart.tuning.workflow import tune_model


@click.command("tune")
@click.argument("model", metavar="MODEL")
@click.option("--targets", multiple=True, metavar="TARGET", help="targets to use (default: all)")
@click.option(
    "--objective",
    type=click.Choice([o.value for o in Objective]),
    default=Objective.LATENCY.value,
    show_default=True,
    help="sequential latency, makespan with unit concurrency, or latency against memory; "
    "with --cluster, latency or throughput (a stream's rate)",
)
@click.option(
    "--search",
    "method",
    type=click.Choice([m.value for m in Method]),
    default=Method.AUTO.value,
    show_default=True,
)
@click.option(
    "--budget", type=float, default=None, metavar="SECONDS",
    help="wall time for the whole command, from its start: the best plan found in it "
    "(default: 60, none with --thorough)",
)  # fmt: skip
@click.option("--pin", "pins", multiple=True, metavar="SELECTOR=TARGET", help="force nodes")
@click.option("--forbid", "forbids", multiple=True, metavar="SELECTOR=TARGET", help="keep off")
@click.option("--memory", multiple=True, metavar="DEVICE=SIZE", help="cap, e.g. opencl:0=512MB")
@click.option(
    "--fallback",
    default=None,
    metavar="TARGET",
    help="target for what the others cannot run (joins --targets)",
)
@click.option(
    "--profile",
    "profile_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="plan from this profile (another machine's: planning only, nothing runs)",
)
@click.option("--profiles", type=click.Path(file_okay=False), default=None, help="profile dir")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="plan file")
@click.option("--search-dir", type=click.Path(file_okay=False), default="search", show_default=True)
@click.option(
    "--rounds", type=int, default=10, show_default=True,
    help="timed rounds per plan (more, up to 20x, until they take 2 s; a quick plan "
    "runs a settled block of runs per round)",
)  # fmt: skip
@click.option("--storage", default=None, metavar="URL", help="optuna RDB URL shared by workers")
@click.option(
    "--seed", type=int, default=0, show_default=True,
    help="seed of the random inputs and of optuna's sampler (0 to 2**32 - 1)",
)  # fmt: skip
@click.option(
    "--peers/--no-peers", default=True, show_default=True,
    help="also time onnxruntime alone and openvino alone, each at its defaults",
)  # fmt: skip
@memory_limit_option
@click.option(
    "--thorough", is_flag=True, default=False,
    help="profile every target in full, not only those that could beat the quickest "
    "whole model (the screen)",
)  # fmt: skip
@tune_cluster_options
@input_shape_option
@freeze_option
@precision_option
@tolerance_option
@task_options
@user_errors
def tune_command(
    model: str,
    targets: tuple[str, ...],
    objective: str,
    method: str,
    budget: float | None,
    pins: tuple[str, ...],
    forbids: tuple[str, ...],
    memory: tuple[str, ...],
    fallback: str | None,
    profile_file: str | None,
    profiles: str | None,
    output: str | None,
    search_dir: str,
    rounds: int,
    storage: str | None,
    seed: int,
    peers: bool,
    thorough: bool,
    memory_limit: str | None,
    cluster: dict[str, Any],
    input_shapes: tuple[str, ...],
    freeze: tuple[str, ...],
    precision: str,
    tolerance: str | None,
    task: dict[str, Any],
) -> None:
    """Profile what is missing, search the best plan, verify it by running, and save it."""
    device_memory = () if cluster else memory  # with --cluster, --memory caps hosts
    search = SearchOptions(
        constraints=Constraints.from_cli(pins, forbids, device_memory, fallback),
        objective=objective,
        method=method,
        seed=seed,
        storage=storage,
        precision=precision,
        tolerance=tolerance,
    )
    options = TuneOptions(
        targets=split_list(targets) or None,
        search=search,
        profile_file=profile_file,
        profiles_dir=profiles,
        output=output,
        search_dir=search_dir,
        rounds=rounds,
        input_shapes=parse_input_shapes(input_shapes),
        peers=peers,
        freeze=parse_freeze(freeze),
        thorough=thorough,
        time_budget_s=budget,
        started=command_started(),
        memory_limit=parse_memory_limit(memory_limit),
        host_memory=parse_host_memory(memory) if cluster else {},
        **cluster,
        **task,
    )
    if cluster:
        return tune_on_cluster(model, options)
    columns = (
        TextColumn("{task.fields[stage]:<8} {task.description:<36}"),
        BarColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with progress_display(*columns) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(stage: str, done: int, total: int, label: str) -> None:
            doing(stage, label)
            if stage not in tasks:
                tasks[stage] = bar.add_task(label[:36], total=total or None, stage=stage)
            bar.update(tasks[stage], completed=done, total=total or None, description=label[:36])

        report = tune_model(model, options, progress=progress)
    print_report(report)


def _predicted_drop(row: PlanRow, metric: Metric, shown: bool) -> list[str]:
    """The row's predicted-drop cell, or no cell where the table has no such column."""
    if not shown:
        return []
    return ["-" if row.predicted_drop is None else metric.short(row.predicted_drop)]


def _print_peers(report: TuneReport, metric: Metric) -> None:
    """The peers' times and drops, and a line where the peer setting the default errs.

    With a task metric, a peer beyond the budget is named with the answers it changes
    beside those the chosen plan keeps, so a user sees the plan did not follow it.
    """
    if not report.peers:
        return
    timed = ", ".join(
        f"{name} {m.median_s * 1e3:.2f} ms ({metric.describe(m.max_error)}"
        f"{'' if m.correct else ', over the budget'})"
        for name, m in report.peers.items()
    )
    ratio = report.vs_best_peer
    versus = "" if ratio is None else f"; chosen / best peer: {ratio:.2f}x"
    if ratio is not None and report.apart_from_best_peer:
        versus += " (timed apart, no interval)"
    console.print(f"peers as installed: {timed}{versus}")
    measured = report.plan.measured
    if metric.name not in (AGREEMENT, TOPK) or measured is None or measured.max_error is None:
        return
    on = "" if report.judge is None else f" on {report.judge.describe()}"
    for name, peer in report.peers.items():
        if not peer.correct:
            console.print(
                f"{name} changes {peer.max_error:.1%} of answers{on}; the plan keeps "
                f"{1 - measured.max_error:.1%}"
            )


def print_report(report: TuneReport) -> None:
    """The per-plan table, the notes, and where everything was saved."""
    if report.profiled is not None:
        p = report.profiled
        resumed = f" ({p.resumed} resumed from their saved passes)" if p.resumed else ""
        console.print(
            f"profile: {p.new} new measurements{resumed}, {p.reused} reused ({p.elapsed_s:.1f} s)"
        )
    if report.partitions_measured is not None:
        m = report.partitions_measured
        console.print(
            f"measure: {m.new} candidate partitions timed whole, {m.reused} reused "
            f"({m.elapsed_s:.1f} s)"
        )
    outcome = report.outcome
    if outcome.ilp is not None:
        ilp = outcome.ilp
        console.print(
            f"ILP: {ilp.variables} variables, solved in {ilp.solve_s:.2f} s, "
            f"gap {ilp.gap:.2%} ({ilp.status})"
        )
    if outcome.optuna is not None:
        console.print(
            f"optuna: {outcome.optuna.new_trials} new trials ({outcome.optuna.trials} in the study)"
        )
    table = Table(title=f"{report.model}: plans (speedup over the best single target)")
    table.add_column("plan", no_wrap=True, min_width=max(len(r.label) + 2 for r in report.rows))
    metric = report.judge.metric if report.judge is not None else Metric(MAX_REL)
    drop = "error" if metric.name == MAX_REL else f"{metric.label} drop"
    predicts = any(row.predicted_drop is not None for row in report.rows)
    predicted_drop = ["predicted drop"] if predicts else []
    for column in ("predicted", "measured", *predicted_drop, drop, "speedup", "partitions",
                   "copies", "peak memory"):  # fmt: skip
        table.add_column(column)
    for row in report.rows:
        marker = " *" if row.name == report.chosen else ""
        table.add_row(
            row.label + marker,
            f"{row.predicted_s * 1e3:.2f} ms",
            "-" if row.measured_s is None else f"{row.measured_s * 1e3:.2f} ms",
            *_predicted_drop(row, metric, predicts),
            "-" if row.max_error is None else metric.short(row.max_error),
            "-" if row.speedup is None else f"{row.speedup:.2f}x",
            str(row.partitions),
            str(row.copies),
            ", ".join(f"{d} {format_size(b)}" for d, b in row.memory_bytes.items()),
        )
    print_table(table)
    _print_peers(report, metric)
    for note in report.notes:
        console.print(styled(("note:", "yellow"), f" {note}"))
    console.print(
        f"chosen: {report.chosen} in {plan_precisions(report.plan)} "
        f"(search pick: {report.search_pick})"
    )
    console.print(f"plan: {report.plan_path}")
    console.print(f"saved: {report.directory}")
    print_peak_memory()
