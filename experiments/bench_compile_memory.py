"""Benchmark: what compiling a large model whole costs in resident memory, and how long.

For each model and whole-model target, one child process per (weights, repeat) loads the
model, then compiles a one-target plan of it, sampling its resident set every 5 ms. The
weights are either `apart` (autopart's default: a model of 64 MiB of constants or more
keeps its large weights in files the library maps, `autopart.ir.weights`) or `embedded`
(the threshold raised past the model: the library reads the weights out of serialised
bytes). Reported, in GiB over what the process held before the compile: `peak` (the
highest sample during it) and `held` (after it, its freed memory handed back), and the
compile's seconds. The two kinds of run alternate, so drift hits both alike.

Writes experiments/results/compile_memory.csv and prints a table of medians.

    python experiments/bench_compile_memory.py [--models vgg19,resnet50] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

import pandas as pd
from _common import resident_gib, show, write_csv

from autopart.targets.resolve import available_targets

TARGETS = ("cpu@onnxruntime", "cpu@openvino", "cpu@openvino:bf16")  # those offered here


def child(model: str, target: str, weights_mode: str) -> None:
    """In this process: compile ``model`` whole on ``target``; print one JSON line."""
    import autopart
    from autopart.host_memory import release_freed_memory
    from autopart.ir import weights
    from autopart.plan.assign import plan_from_rules
    from autopart.runtime.plan_executor import PlanExecutor

    if weights_mode == "embedded":
        weights.MODEL_BYTES = 1 << 62
    graph = autopart.load(model)
    plan = plan_from_rules(graph, [f"re:.*={target}"], "cpu@numpy", model)
    release_freed_memory()
    before, peak, running = resident_gib(), [0.0], [True]

    def sample() -> None:
        while running[0]:
            peak[0] = max(peak[0], resident_gib())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    executor = PlanExecutor(plan, graph)
    seconds = time.perf_counter() - started
    running[0] = False
    sampler.join()
    release_freed_memory()
    held = resident_gib() - before
    executor.close()
    print(json.dumps({"peak": max(peak[0], resident_gib()) - before, "held": held, "s": seconds}))


def main() -> None:
    """Run the children, interleaved, and write the CSV."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="vgg19,resnet50")
    offered = {str(t) for t in available_targets()}
    parser.add_argument("--targets", default=",".join(t for t in TARGETS if t in offered))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        child(*arguments.child)
        return
    rows = []
    for repeat in range(arguments.repeat):
        for model in arguments.models.split(","):
            for target in arguments.targets.split(","):
                for mode in ("embedded", "apart") if repeat % 2 == 0 else ("apart", "embedded"):
                    command = [sys.executable, __file__]
                    command += ["--child", model, target, mode]
                    done = subprocess.run(command, capture_output=True, text=True, check=True)
                    figures = json.loads(done.stdout.strip().splitlines()[-1])
                    rows.append({"model": model, "target": target, "weights": mode, **figures})
                    print(rows[-1], flush=True)
    frame = pd.DataFrame(rows).rename(columns={"peak": "peak_gib", "held": "held_gib"})
    path = write_csv(frame, "compile_memory.csv")
    medians = frame.groupby(["model", "target", "weights"], sort=False).agg(
        peak_gib=("peak_gib", statistics.median),
        held_gib=("held_gib", statistics.median),
        seconds=("s", statistics.median),
        runs=("s", "size"),
    )
    show(f"compile memory (medians; {path.name})", medians.reset_index())


if __name__ == "__main__":
    main()
