"""``autopart bench MODEL...``: the peers, every single target, the baselines and the tuned plan."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from autopart.cli.common import (
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
from autopart.errors import AutopartError
from autopart.io import check_writable
from autopart.tuning.metrics import Metric, parse_metric
from autopart.tuning.plan_rows import plan_label

if TYPE_CHECKING:
    import pandas as pd


@click.command("bench")
@click.argument("models", nargs=-1, required=True, metavar="MODEL...")
@click.option("--targets", multiple=True, metavar="TARGET", help="targets to use (default: all)")
@click.option(
    "--rounds", type=int, default=15, show_default=True,
    help="timed rounds per plan (more, up to 20x, until they take 2 s; a quick plan "
    "runs a settled block of runs per round)",
)  # fmt: skip
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), default="bench.csv",
              show_default=True)  # fmt: skip
@click.option("--search-dir", type=click.Path(file_okay=False), default="search", show_default=True)
@click.option("--profiles", type=click.Path(file_okay=False), default=None, help="profile dir")
@click.option(
    "--baselines/--no-baselines", default=True, show_default=True,
    help="also time every single target and the provider rule, per-op-best and HEFT "
    "(each target profiled in full); --no-baselines times the peers and the tuned plan only",
)  # fmt: skip
@input_shape_option
@freeze_option
@precision_option
@tolerance_option
@memory_limit_option
@task_options
@user_errors
def bench_command(
    models: tuple[str, ...],
    targets: tuple[str, ...],
    rounds: int,
    csv_path: str,
    search_dir: str,
    profiles: str | None,
    baselines: bool,
    input_shapes: tuple[str, ...],
    freeze: tuple[str, ...],
    precision: str,
    tolerance: str | None,
    memory_limit: str | None,
    task: dict[str, Any],
) -> None:
    """Time the peers, every single target, the baselines and the tuned plan, with errors.

    The peers are each installed codegen's library alone at its defaults (onnxruntime,
    OpenVINO as installed and OpenVINO f32); every row shows its output error against f32.

    --input-shape, --freeze, --precision, --tolerance, --inputs, --metric and --max-drop
    apply to every MODEL; every row shows its drop in the metric on the samples.
    --no-baselines times only the peers and the tuned plan (twice: the noise floor).
    """
    from autopart.tuning.bench import bench_models, write_csv
    from autopart.tuning.options import BenchOptions

    options = BenchOptions.build(
        targets=split_list(targets) or None,
        rounds=rounds,
        search_dir=search_dir,
        profiles_dir=profiles,
        baselines=baselines,
        input_shapes=parse_input_shapes(input_shapes),
        freeze=parse_freeze(freeze),
        precision=precision,
        tolerance=tolerance,
        memory_limit=parse_memory_limit(memory_limit),
        **task,
    )
    check_writable(csv_path, "CSV file")
    columns = (TextColumn("{task.description:<44}"), BarColumn(), TimeElapsedColumn())
    with progress_display(*columns) as bar:
        task = bar.add_task("preparing", total=None)

        def progress(stage: str, done: int, total: int, label: str) -> None:
            doing(stage, label)
            bar.update(
                task, completed=done, total=total or None, description=f"{stage} {label}"[:44],
                stage=stage,
            )  # fmt: skip

        try:
            table = bench_models(models, options, progress=progress)
        except KeyboardInterrupt as interrupt:
            left = "was left as it was" if os.path.exists(csv_path) else "was not written"
            interrupt.add_note(f"{csv_path} {left}")
            raise
    write_csv(table, csv_path)
    for model, rows in table.groupby("model", sort=False):
        _print_model(str(model), rows)
    console.print(f"wrote {csv_path}")
    print_peak_memory()


def _print_model(model: str, rows: pd.DataFrame) -> None:
    """The table of one model's rows, its tolerance, noise floor and what could not run."""
    from autopart.targets.resolve import machine_precisions
    from autopart.tuning.bench import peer_columns

    view = Table(title=f"{model} (medians of {int(rows['runs'].max())} interleaved runs)")
    labels = [
        plan_label(plan, int(off))
        for plan, off in zip(rows["plan"], rows["off_target_nodes"], strict=True)
    ]
    rows = rows.assign(label=labels)
    view.add_column("plan", no_wrap=True, min_width=max(len(label) for label in labels))
    versus = [column for column in peer_columns().values() if column in rows]
    metric = str(rows["metric"].iloc[0]) if "metric" in rows else "max-rel"
    drop = "error" if metric == "max-rel" else f"{metric} drop"
    columns = ("median", drop, "predicted", *(c.replace("_", " ") for c in versus),
               "vs best peer", "partitions")  # fmt: skip
    for column in columns:
        view.add_column(column)
    for row in rows.sort_values("median_ms").itertuples():
        view.add_row(
            str(row.label), _ms(row.median_ms),
            drop_cell(metric, row.metric_drop, row.within_budget), _ms(row.predicted_ms),
            *(_ratio(getattr(row, c)) for c in versus), _ratio(row.vs_best_peer),
            str(row.partitions),
        )  # fmt: skip
    print_table(view)
    budget = rows["budget"].dropna()
    if len(budget):
        console.print(
            f"precisions here: {', '.join(machine_precisions())}; {metric} held to "
            f"{drop_cell(metric, float(budget.iloc[0]), True)} on {rows['samples'].iloc[0]} (drops "
            "beyond it are marked !; the best peer is the quickest within it)"
        )
    floor = float(rows["noise_floor"].iloc[0]) if "noise_floor" in rows else float("nan")
    spread = float(rows["noise_spread"].iloc[0]) if "noise_spread" in rows else float("nan")
    if floor == floor:
        within = "" if spread != spread else f"; 95% interval of their ratio within ±{spread:.1%}"
        console.print(f"noise floor (the tuned plan timed twice): {floor:.1%}{within}")
    for row in rows[rows["error"] != ""].itertuples():
        console.print(styled(("note:", "yellow"), f" {row.plan} could not run: {row.error}"))


def _ms(value: float) -> str:
    return "-" if value != value else f"{value:.2f} ms"


def drop_cell(metric: str, value: float, within: object) -> str:
    """A drop as ``tune`` shows it in ``metric`` (``3.3%`` of answers, ``41.2 dB``, ``1.3e-03``).

    Marked `` !`` unless ``within`` its budget; ``-`` where nothing was measured.
    """
    if value != value:
        return "-"
    try:
        named = parse_metric(metric) or Metric(metric)
    except AutopartError:  # a score function of the user's: named "custom"
        named = Metric(metric)
    return named.short(value) + ("" if within is True or within == 1.0 else " !")


def _ratio(value: float) -> str:
    return "-" if value != value else f"{value:.2f}x"
