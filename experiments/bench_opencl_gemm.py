"""Benchmark: the opencl codegen against onnxruntime (and numpy), plus its GEMM kernels.

By default, every zoo model (or those named) compiled wholly onto
``opencl:0`` runs side by side with onnxruntime's CPU provider in this process,
alternating run by run so that machine noise hits them alike. onnxruntime runs with
``session.intra_op.allow_spinning=0``: its idle threads otherwise spin after each run and
starve whatever runs next (its own latency is the same either way; the spinning session is
timed alone too). The opencl wall time covers the input upload, the run and the output
download (as onnxruntime's covers its copies); the device time is ``run_timed``
(profiling events). The numpy reference is timed alone afterwards. Writes
``experiments/results/opencl_vs_onnxruntime.csv``. Target: resnet50 no slower than 3x
onnxruntime.

With ``--gemm``: the two packed GEMM kernels on resnet50's convolution shapes (GFLOP/s from
profiling events, best of the repeats). Writes ``experiments/results/opencl_gemm.csv``.

    python experiments/bench_opencl_gemm.py [--repeat 15] [MODEL ...]
    python experiments/bench_opencl_gemm.py --gemm [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

import autopart
from autopart.runtime import Executor, random_inputs
from autopart.targets.codegen import Placement
from autopart.targets.opencl import OpenCLCodegen, discover_opencl_devices
from autopart.targets.opencl.lowering import Builder
from autopart.targets.opencl.matmul import MVEC, PVEC, gemm_launches
from autopart.targets.opencl.subgraph import Step

RESULTS = Path(__file__).parent / "results"

# (output channels, reduction depth, pixels) of resnet50's convolutions, plus two FC layers
GEMM_SHAPES = [
    (64, 147, 12544), (64, 64, 3136), (64, 576, 3136), (256, 64, 3136), (128, 1152, 784),
    (512, 128, 784), (256, 2304, 196), (1024, 256, 196), (512, 4608, 49), (2048, 512, 49),
    (1000, 2048, 1), (4096, 9216, 1),
]  # fmt: skip


def _timed(fn: Callable[[], object]) -> float:
    begin = time.perf_counter()
    fn()
    return time.perf_counter() - begin


def bench_model(name: str, repeat: int) -> dict[str, object]:
    import onnxruntime as ort

    device = discover_opencl_devices()[0]
    model = autopart.load_zoo_model(name)
    graph = autopart.load(model)
    feeds = random_inputs(graph)
    start = time.perf_counter()
    compiled = OpenCLCodegen().compile(
        graph, graph.nodes, graph.inputs, graph.outputs, Placement(device)
    )
    compile_s = time.perf_counter() - start
    # onnxruntime's idle pool threads spin after every run, which takes both cores away from
    # whatever runs next in this process; without spinning its own latency is unchanged.
    quiet = ort.SessionOptions()
    quiet.add_session_config_entry("session.intra_op.allow_spinning", "0")
    source = model.SerializeToString()
    session = ort.InferenceSession(source, quiet, providers=["CPUExecutionProvider"])
    spinning = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    executor = Executor(graph)

    def opencl_run() -> None:
        env = {key: device.from_host(value) for key, value in feeds.items()}
        compiled.run(env)
        for key in graph.outputs:
            device.to_host(env[key])

    def opencl_device() -> float:
        return compiled.run_timed({key: device.from_host(v) for key, v in feeds.items()})

    def ort_run() -> None:
        session.run(None, feeds)

    for _ in range(2):
        opencl_run()
        ort_run()
    walls, devices, ort_times = [], [], []
    for _ in range(repeat):  # side by side: alternate run by run
        walls.append(_timed(opencl_run))
        ort_times.append(_timed(ort_run))
        devices.append(opencl_device())
    spinning.run(None, feeds)
    ort_default = [_timed(lambda: spinning.run(None, feeds)) for _ in range(repeat)]
    executor.run(feeds)
    numpy_times = [executor.run(feeds).latencies[0] for _ in range(repeat)]
    opencl_ms = statistics.median(walls) * 1e3
    ort_ms = statistics.median(ort_times) * 1e3
    return {
        "model": name,
        "nodes": len(graph.nodes),
        "steps": len(compiled.steps),
        "compile_s": round(compile_s, 2),
        "opencl_ms": round(opencl_ms, 2),
        "opencl_device_ms": round(statistics.median(devices) * 1e3, 2),
        "onnxruntime_ms": round(ort_ms, 2),
        "onnxruntime_spinning_ms": round(statistics.median(ort_default) * 1e3, 2),
        "numpy_ms": round(statistics.median(numpy_times) * 1e3, 2),
        "ratio_vs_onnxruntime": round(opencl_ms / ort_ms, 3),
        "repeat": repeat,
    }


def bench_gemm(repeat: int) -> list[dict[str, object]]:
    device = discover_opencl_devices()[0]
    graph = autopart.load("squeezenet")  # any graph: the builder only needs one to exist
    builder = Builder(device, graph, None)
    node = graph.nodes[0]
    rows = []
    rng = np.random.default_rng(0)
    for m, k, p in GEMM_SHAPES:
        weights = rng.standard_normal((1, m, k), dtype=np.float32)
        x = builder.upload(rng.standard_normal((k, p), dtype=np.float32))
        expected = weights[0] @ x.get()
        for name, force_mvec in ((PVEC[0], False), (MVEC[0], True)):
            if name == PVEC[0] and p < 16:
                continue
            epilogue = [builder.upload(np.zeros(m, np.float32)), None, np.int32(0), np.int32(0)]
            launch = gemm_launches(
                builder, node, weights, p, 1, x, (0, 0, p, 1), (0, 0, p, 1), epilogue, force_mvec
            )
            step = Step(name, [], ["y"], [(m, p)], launches=[launch], escapes=[False])
            best = np.inf
            for _ in range(repeat):
                outs, events = step.run(builder.queue, device.pool(None), [])
                events[-1].wait()
                best = min(best, (events[-1].profile.end - events[-1].profile.start) * 1e-9)
            error = float(np.abs(outs[0].get() - expected).max() / np.abs(expected).max())
            rows.append(
                {
                    "kernel": launch.kernel.function_name,
                    "m": m,
                    "k": k,
                    "p": p,
                    "ms": round(best * 1e3, 3),
                    "gflops": round(2 * m * k * p / best / 1e9, 1),
                    "max_rel_error": error,
                }
            )
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemm", action="store_true", help="benchmark the GEMM kernels")
    parser.add_argument("models", nargs="*", default=autopart.zoo_names())
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    if not discover_opencl_devices():
        raise SystemExit("no OpenCL device found")
    RESULTS.mkdir(exist_ok=True)
    if args.gemm:
        table = pd.DataFrame(bench_gemm(args.repeat))
        table.to_csv(RESULTS / "opencl_gemm.csv", index=False)
    else:
        rows = []
        for name in args.models:
            rows.append(bench_model(name, args.repeat))
            print(rows[-1], flush=True)
        table = pd.DataFrame(rows)
        table.to_csv(RESULTS / "opencl_vs_onnxruntime.csv", index=False)
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
