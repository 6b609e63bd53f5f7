"""How much two hosts of one core each could gain on this machine, with no Ray and no driver.

The same compiled model runs in one process pinned to one core, alone, then in two such
processes on two cores side by side, each for ``--seconds``; in turn, ``--rounds`` times.
The ratio of the two processes' summed rate to one's alone is the most a stream on a
``local:2`` cluster can gain here (``results/two_cores.csv``): what ``exp_hosts.py``'s
replicas lose below it is Ray's and the driver's share of the cores.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time

import numpy as np
import pandas as pd
from _common import show, write_csv


def _rate(
    core: int, path: str, precision: str, seconds: float, results: multiprocessing.Queue
) -> None:
    """Runs of ``path`` per second on ``core`` alone, one inference thread."""
    os.sched_setaffinity(0, {core})
    import openvino as ov

    compiled = ov.Core().compile_model(
        path, "CPU", {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": precision}
    )
    request = compiled.create_infer_request()
    feeds = {
        port.any_name: np.random.default_rng(0).random(tuple(port.shape), np.float32)
        for port in compiled.inputs
    }
    for _ in range(5):
        request.infer(feeds)
    began, count = time.perf_counter(), 0
    while time.perf_counter() - began < seconds:
        request.infer(feeds)
        count += 1
    results.put(count / (time.perf_counter() - began))


def _side_by_side(cores: list[int], path: str, precision: str, seconds: float) -> list[float]:
    results: multiprocessing.Queue = multiprocessing.Queue()
    workers = [
        multiprocessing.Process(target=_rate, args=(core, path, precision, seconds, results))
        for core in cores
    ]
    for worker in workers:
        worker.start()
    rates = [results.get(timeout=seconds * 10 + 120) for _ in workers]  # a worker may fail
    for worker in workers:
        worker.join()
    return rates


def main() -> None:
    """Time one core alone and two side by side, in turn; write the CSV and print it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="resnet50", help="a zoo name or an ONNX file")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import onnx

    from autopart.zoo import load_zoo_model, zoo_names

    cores = sorted(os.sched_getaffinity(0))[:2]
    path = args.model
    if args.model in zoo_names():
        path = f"{tempfile.gettempdir()}/probe_two_cores_{args.model}.onnx"
        onnx.save(load_zoo_model(args.model), path)
    rows = []
    for index in range(args.rounds):
        (alone,) = _side_by_side(cores[:1], path, args.precision, args.seconds)
        both = _side_by_side(cores, path, args.precision, args.seconds)
        rows.append({"round": index, "one_core": alone, "two_cores": sum(both),
                     "ratio": sum(both) / alone})  # fmt: skip
    frame = pd.DataFrame(rows)
    show(f"{args.model} on one core and on two ({args.precision})", frame)
    write_csv(frame, "two_cores.csv")


if __name__ == "__main__":
    main()
