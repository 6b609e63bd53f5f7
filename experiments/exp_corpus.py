"""Differential testing of the corpus: every model on every whole-model target, against onnxruntime.

Each model of ``experiments/corpus`` (fetched into its cache) runs through the command
line as a user runs it, one process per run: ``python -m autopart run MODEL --assign
're:.*=TARGET' --fallback cpu@numpy --inputs x.npz --out y.npz`` with the model's
``--input-shape`` and ``--freeze`` options and inputs drawn from its input specs. The
outputs are compared with onnxruntime alone running the original file on the same inputs
(frozen inputs fed their values). Each (model, target) gets one status:

- ``ok``: every output within the check tolerance of onnxruntime's (a model shipped
  quantised: within a few steps of its 8-bit range, :func:`tolerance_for`), in order or
  once rows of tied scores are put in onnxruntime's order (:func:`compare`);
- ``mismatch``: an output beyond it (or of another shape, or missing);
- ``library``: a mismatch that the target's library running the model alone, as
  installed but in f32 (``openvino alone f32``), makes as well: the target's outputs
  agree with the library's (:func:`library_alone`), so the difference is the library's
  against onnxruntime's, not autopart's (OpenVINO's f32 kernels on a CPU with AVX2 alone:
  a text detector 1.6e-3 off);
- ``refused``: one ``error:`` line and exit 2 (the line names the construct);
- ``crash``: a traceback, a signal or any other exit;
- ``timeout``: no answer within ``--timeout`` seconds.

``cpu@numpy`` is every node on the reference. Nodes a target does not claim fall back to
``cpu@numpy``; their count is reported. Writes ``experiments/results/<tag>.csv`` (one row
per model and target) and ``<tag>.png`` (statuses as a grid), and prints a summary.

    python experiments/exp_corpus.py                         # the whole corpus
    python experiments/exp_corpus.py 'tv_*' w_basic_pitch    # some models
    python experiments/exp_corpus.py --sample 12 --seed 3    # a rotating sample
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent / "corpus"))
from corpus import (
    CorpusModel,
    crash_detail,
    load_corpus,
    make_inputs,
    problem,
    run_cli,
    save_rows,
    select,
)

from autopart.ir.target import VirtualDevice
from autopart.settings import COMMON
from autopart.targets.peer import PeerInputs
from autopart.targets.registry import declared_peers
from autopart.targets.resolve import available_targets
from autopart.tuning.accuracy import QUANTISED_MODEL_OPS
from autopart.tuning.oracle import relative_error
from autopart.tuning.peers import peers
from autopart.tuning.ties import tie_reorderings

RESULTS = Path(__file__).parent / "results"
QUANTISED_STEPS = 5  # of 255: what a model shipped quantised may differ by
ABSOLUTE = 1e-5  # about 100 float32 ulps of a value of order 1, as allclose's atol
STATUSES = ("ok", "library", "mismatch", "refused", "crash", "timeout", "oracle failed")
COLOURS = {
    "ok": "#1a9850",
    "library": "#a6d96a",
    "mismatch": "#fdae61",
    "refused": "#74add1",
    "crash": "#d73027",
    "timeout": "#7b3294",
    "oracle failed": "#bababa",
}


def whole_targets() -> list[str]:
    """The reference and every whole-device target at f32 offered here."""
    found = [t for t in available_targets() if t.unit is None and t.precision is None]
    return ["cpu@numpy", *(str(t) for t in found if str(t) != "cpu@numpy")]


def oracle(model: CorpusModel, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime alone, default options, on the original file (frozen inputs fed too)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(model.path()), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def run_one(
    model: CorpusModel, target: str, feeds: dict[str, np.ndarray], work: Path, timeout: float
) -> dict[str, Any]:
    """One ``autopart run`` of ``model`` on ``target``: its status, outputs and fallbacks."""
    frozen = {spec.name for spec in model.inputs if spec.freeze}
    inputs, outputs, plan = work / "inputs.npz", work / "outputs.npz", work / "plan.json"
    outputs.unlink(missing_ok=True)
    plan.unlink(missing_ok=True)
    np.savez(inputs, **{k: v for k, v in feeds.items() if k not in frozen})
    command = [
        sys.executable, "-m", "autopart", "run", str(model.path()), *model.cli_arguments(),
        "--assign", f"re:.*={target}", "--fallback", "cpu@numpy", "--repeat", "1",
        "--warmup", "0", "--inputs", str(inputs), "--out", str(outputs),
        "--save-plan", str(plan),
    ]  # fmt: skip
    result = run_cli(command, timeout)
    if result["status"] == "ok" and not outputs.exists():
        result.update(status="crash", detail=crash_detail(0, result["stderr"]))
    if result["status"] != "ok":
        return {k: v for k, v in result.items() if k != "stderr"}
    seconds = result["seconds"]
    with np.load(outputs) as saved:
        got = {name: saved[name] for name in saved.files}
    fallback = 0
    if plan.exists():
        assignment = json.loads(plan.read_text()).get("assignment", {})
        fallback = sum(1 for where in assignment.values() if where != target)
    return {"status": "ran", "got": got, "fallback": fallback, "seconds": seconds}


def library_alone(
    model: CorpusModel,
    target: str,
    feeds: dict[str, np.ndarray],
    got: dict[str, np.ndarray],
    tolerance: float,
) -> dict[str, Any]:
    """The ``library`` status, where ``target``'s library alone in f32 gives what it gave.

    Asked of a whole-device target that ran every node and missed onnxruntime: the peer
    that stands for the target's codegen in f32 runs the original file on the same feeds.
    Nothing (the row stays a mismatch) where there is no such peer, it fails, or its
    outputs differ from the target's.
    """
    spec = VirtualDevice.parse(target)
    if spec.unit is not None or spec.precision is not None:
        return {}
    chosen = [
        peer
        for peer in declared_peers(available=True)
        if peer.codegen == spec.codegen and peer.stands_for_plan and peer.precision() is None
    ]
    if not chosen:
        return {}
    frozen = {s.name: feeds[s.name] for s in model.inputs if s.freeze}
    shapes = {s.name: tuple(s.shape) for s in model.inputs}
    runners, _ = peers(model.path(), PeerInputs(frozen=frozen, shapes=shapes), only=chosen[0].name)
    if not runners:
        return {}
    alone = runners[chosen[0].name]({k: v for k, v in feeds.items() if k not in frozen})
    status, apart, _ = compare(got, alone, tolerance)
    if status != "ok":
        return {}
    return {
        "status": "library",
        "detail": f"{chosen[0].name} gives the same outputs ({apart:.2g} apart): the "
        "library's own difference from onnxruntime",
    }


def compare(
    got: dict[str, np.ndarray],
    want: dict[str, np.ndarray],
    tolerance: float = COMMON.check_tolerance,
) -> tuple[str, float, str]:
    """(status, largest relative error, detail) of ``got`` against the oracle's ``want``.

    As :func:`compare_in_order`; where that finds a mismatch, the outputs also match when
    they do once rows of tied scores are put in the oracle's order
    (:func:`autopart.tuning.ties.tie_reorderings`): a detector's boxes of scores a few
    ulps apart, sorted another way. The detail says so.
    """
    verdict = compare_in_order(got, want, tolerance)
    if verdict[0] == "ok":
        return verdict
    for key, reordered in tie_reorderings(got, want, tolerance):
        status, error, detail = compare_in_order(reordered, want, tolerance)
        if status == "ok":
            tied = (
                f"rows of tied {key} in another order (in order: {verdict[1]:.3g} on {verdict[2]})"
            )
            return "ok", error, "; ".join(part for part in (tied, detail) if part)
    return verdict


def compare_in_order(
    got: dict[str, np.ndarray],
    want: dict[str, np.ndarray],
    tolerance: float = COMMON.check_tolerance,
) -> tuple[str, float, str]:
    """(status, largest relative error, detail) of ``got`` against ``want``, row by row.

    An output matches when its largest error relative to its largest magnitude is within
    ``tolerance``, or, elementwise, within ``ABSOLUTE + COMMON.check_tolerance * |want|``
    (numpy's allclose): a map of probabilities near zero everywhere (a
    detector's on noise) differs in its last bits, which no relative measure can judge.
    The detail says which criterion passed.
    """
    worst, detail, absolute = 0.0, "", []
    for name, expected in want.items():
        if name not in got:
            return "mismatch", float("inf"), f"output {name} missing"
        have, expected = np.asarray(got[name]), np.asarray(expected)
        if have.shape != expected.shape:
            return "mismatch", float("inf"), f"{name}: shape {have.shape} vs {expected.shape}"
        if expected.dtype.kind not in "fc":
            error = 0.0 if np.array_equal(have, expected) else 1.0
        else:
            error = relative_error(have, expected)
            if error > tolerance and _close(have, expected):
                absolute.append(name)
                continue
        if not error <= worst:
            worst, detail = error, name
    if worst <= tolerance:
        return (
            "ok",
            worst,
            f"within {ABSOLUTE:g} absolute: {', '.join(absolute)}" if absolute else "",
        )
    return "mismatch", worst, detail


def _close(have: np.ndarray, want: np.ndarray) -> bool:
    """Whether every element is within ``ABSOLUTE + COMMON.check_tolerance * |want|``.

    NaN equals NaN.
    """
    return bool(
        np.allclose(
            have.astype(np.float64),
            want.astype(np.float64),
            rtol=COMMON.check_tolerance,
            atol=ABSOLUTE,
            equal_nan=True,
        )
    )


def tolerance_for(model: CorpusModel) -> float:
    """The check tolerance; for a model shipped quantised, a few steps of its 8-bit range.

    Its runtimes differ in how they round its own quantisation (the scale's last ulp, the
    rounding of ties), a step of 1/255 of a range apart, and that moves its outputs by a
    few such steps: :data:`QUANTISED_STEPS` of them are allowed.
    """
    proto = onnx.load(str(model.path()), load_external_data=False)
    if any(node.op_type in QUANTISED_MODEL_OPS for node in proto.graph.node):
        return QUANTISED_STEPS / 255
    return COMMON.check_tolerance


def test_model(model: CorpusModel, targets: list[str], timeout: float) -> list[dict[str, Any]]:
    """Every target's row for ``model``."""
    base = {"model": model.name, "source": model.source, "family": model.family}
    feeds = make_inputs(model)
    for spec in model.inputs:
        if spec.freeze:
            feeds[spec.name] = np.asarray(spec.frozen_value(), dtype=spec.dtype)
    try:
        want = oracle(model, feeds)
    except Exception as error:  # onnxruntime's own exception types
        detail = str(error).splitlines()[0][:300]
        return [{**base, "target": t, "status": "oracle failed", "detail": detail} for t in targets]
    tolerance = tolerance_for(model)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for target in targets:
            result = run_one(model, target, feeds, Path(folder), timeout)
            row = {**base, "target": target, **{k: v for k, v in result.items() if k != "got"}}
            if result["status"] == "ran":
                row["status"], row["error"], row["detail"] = compare(result["got"], want, tolerance)
                row["tolerance"] = tolerance
                if row["status"] == "mismatch" and not result["fallback"]:
                    row.update(library_alone(model, target, feeds, result["got"], tolerance))
            rows.append(row)
            print(f"{model.name:<34} {target:<18} {row['status']:<9} {row.get('detail', '')}")
    return rows


def plot(frame: pd.DataFrame, path: Path) -> None:
    """The statuses as a grid: a row per target, a column per model."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure

    grid = frame.pivot(index="target", columns="model", values="status")
    codes = grid.map(lambda s: STATUSES.index(s) if s in STATUSES else 0)
    figure = Figure(figsize=(max(8.0, 0.12 * grid.shape[1]), 4.0 + 0.5 * grid.shape[0]))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    cmap = ListedColormap([COLOURS[s] for s in STATUSES])
    axes.imshow(codes.to_numpy(), aspect="auto", cmap=cmap, vmin=0, vmax=len(STATUSES) - 1)
    axes.set_yticks(range(grid.shape[0]), grid.index)
    axes.set_xticks(range(grid.shape[1]), grid.columns, rotation=90, fontsize=4)
    counts = frame["status"].value_counts()
    axes.set_title(", ".join(f"{s}: {counts.get(s, 0)}" for s in STATUSES), fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=150)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="names, or prefixes ending in * (default: all)")
    parser.add_argument("--targets", help="comma-separated (default: every whole f32 target)")
    parser.add_argument("--sample", type=int, help="test this many models, drawn by --seed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    parser.add_argument("--tag", default="corpus_diff")
    args = parser.parse_args()
    models = [m for m in select(load_corpus(), args.models) if problem(m) is None]
    if args.sample:
        rng = np.random.default_rng(args.seed)
        picked = rng.choice(len(models), min(args.sample, len(models)), replace=False)
        models = [models[i] for i in sorted(picked)]
    targets = args.targets.split(",") if args.targets else whole_targets()
    RESULTS.mkdir(exist_ok=True)
    csv = RESULTS / f"{args.tag}.csv"
    rows: list[dict[str, Any]] = []
    for model in models:  # the CSV grows model by model: a stopped run keeps what it did
        rows += test_model(model, targets, args.timeout)
        save_rows(rows, csv)
    frame = pd.DataFrame(rows)
    plot(frame, RESULTS / f"{args.tag}.png")
    print(frame.groupby(["target", "status"]).size().unstack(fill_value=0).to_string())
    print(f"wrote {RESULTS / args.tag}.csv and .png ({len(models)} models)")


if __name__ == "__main__":
    main()
