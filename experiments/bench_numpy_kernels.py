"""Benchmark: the numpy reference on corpus models, per op type, against another checkout.

A tune runs the reference whole (its outputs, the accuracy stage's emulated precisions):
a slow kernel there spends the budget the race needs (RAFT's GridSample took 24 s of a
65 s tune). Each model runs in a fresh process per checkout, ``--repeat`` times after one
warm-up, on the corpus's inputs; each op type's seconds are summed per run, and the median
run is kept. With ``--against DIR`` (another checkout, a ``git worktree``), the two
alternate model by model, which of them goes first alternating too, so that the machine's
slow spells fall on both. Writes ``experiments/results/<tag>.csv`` (one row per model,
checkout and op type) and prints each model's total and its slowest op types.

    python experiments/bench_numpy_kernels.py [PATTERN ...] [--repeat 3] [--against DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "corpus"))
from corpus import load_corpus, make_inputs, problem, select  # noqa: E402

RESULTS = HERE / "results"
CHECKOUT = HERE.parent


def measure(name: str, repeat: int) -> dict[str, Any]:
    """One model on the numpy reference: the median run's seconds, and each op type's."""
    import numpy as np

    from autopart.loader import load_model
    from autopart.ops import registry
    from autopart.runtime import Executor
    from autopart.targets.numpy import codegen

    spent: Counter[str] = Counter()
    real_bind = registry.bind

    def bind(op_type: str, *args: Any, **kwargs: Any) -> Any:
        kernel = real_bind(op_type, *args, **kwargs)

        def timed(*inputs: Any) -> Any:
            started = time.perf_counter()
            try:
                return kernel(*inputs)
            finally:
                spent[op_type] += time.perf_counter() - started

        return timed

    codegen.bind = bind  # type: ignore[attr-defined]
    (model,) = select(load_corpus(), [name])
    graph = load_model(str(model.path()), model.input_shapes() or None)
    feeds = {k: v for k, v in make_inputs(model).items() if k in graph.inputs}
    executor = Executor(graph)
    runs = []
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(repeat + 1):  # the first is a warm-up
            spent.clear()
            started = time.perf_counter()
            executor.run(feeds)
            runs.append((time.perf_counter() - started, dict(spent)))
    total, ops = sorted(runs[1:], key=lambda run: run[0])[len(runs[1:]) // 2]
    return {"total_s": total, "ops": ops}


def run_worker(checkout: Path, name: str, repeat: int, timeout: float) -> dict[str, Any] | None:
    """``measure`` in a fresh process importing autopart from ``checkout``; None if it failed."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [sys.executable, __file__, "--worker", name, "--repeat", str(repeat)]
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=timeout, cwd=checkout
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        print(f"  {name} on {checkout}: {lines[-1] if lines else done.returncode}")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    """Measure the models asked (default: every corpus model whose file is here)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="names, or prefixes ending in *")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout, timed alternately")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--tag", default="numpy_kernels")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args.worker, args.repeat)))
        return
    checkouts = {"this": CHECKOUT} | ({"against": args.against} if args.against else {})
    models = [m for m in select(load_corpus(), args.models or ["*"]) if problem(m) is None]
    rows: list[dict[str, Any]] = []
    for index, model in enumerate(models):
        order = list(checkouts.items())
        for label, checkout in order[::-1] if index % 2 else order:
            found = run_worker(checkout, model.name, args.repeat, args.timeout)
            if found is None:
                continue
            for op, seconds in found["ops"].items():
                rows.append(
                    {"model": model.name, "checkout": label, "total_s": found["total_s"],
                     "op": op, "op_s": seconds}
                )  # fmt: skip
        _print_model(pd.DataFrame(rows), model.name)
    table = pd.DataFrame(rows)
    RESULTS.mkdir(exist_ok=True)
    table.to_csv(RESULTS / f"{args.tag}.csv", index=False)
    print(f"wrote {RESULTS / (args.tag + '.csv')} ({len(models)} models)")


def _print_model(table: pd.DataFrame, name: str) -> None:
    """One line per checkout: the model's total, and its three slowest op types."""
    if table.empty or name not in set(table["model"]):
        return
    mine = table[table["model"] == name]
    totals = mine.groupby("checkout")["total_s"].first()
    for label, total in totals.items():
        ops = mine[mine["checkout"] == label].nlargest(3, "op_s")
        slowest = ", ".join(f"{r.op} {r.op_s:.3f}" for r in ops.itertuples())
        ratio = ""
        if label == "this" and "against" in totals:
            ratio = f"  ({total / totals['against']:.2f}x the other)"
        print(f"{name:48s} {label:8s} {total:8.3f} s{ratio}  slowest: {slowest}", flush=True)


if __name__ == "__main__":
    main()
