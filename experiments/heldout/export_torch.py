"""Export the held-out suite's torch models to ``experiments/heldout/cache/<name>.onnx``.

torch, torchvision and onnxscript are dev-only and pinned in ``suite.toml`` (``[torch]``);
without torch this script says so and exits 0, and the torch models are simply absent.
Another torch version exports the same models, but not byte for byte: the sha256 check
then fails and is reported (the file is kept, and ``fetch.py --check`` flags it).

    pip install torch==2.14.1 torchvision==0.29.1 onnxscript==0.7.2   # dev-only
    python experiments/heldout/export_torch.py             # every torch model
    python experiments/heldout/export_torch.py lstm_text   # some of them

Exporter: ``torch.onnx.export(model, args)`` with every option at its default (the
``torch.export`` based exporter, its default opset, the onnxscript optimizer), saved with
the weights inside the file. The per-node metadata (stack traces naming this checkout's
paths) is dropped so that a re-export is byte-identical. Each export is checked with
``onnx.checker`` and against PyTorch's outputs with onnxruntime.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import math
import sys
from collections import Counter
from pathlib import Path

from suite import CACHE, HeldoutModel, Suite, load_suite, problem

TOLERANCE = 1e-3  # max |onnxruntime - torch| / max(|torch|, 1)


def toolchain_drift(suite: Suite) -> list[str]:
    """The installed torch packages whose version differs from the suite's pins."""
    drift = []
    for package, pinned in suite.toolchain.items():
        try:
            installed = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            installed = "absent"
        if installed.split("+")[0] != pinned:
            drift.append(f"{package} {installed} (suite pins {pinned})")
    return drift


def export(model: HeldoutModel, cache: Path) -> str:
    """Export ``model`` into ``cache``, check it, and return a one-line summary."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch
    from torch_models import build

    module, inputs = build(model.export)
    path = model.path(cache)
    program = torch.onnx.export(module, inputs)  # every option at its default
    if program is None:
        raise RuntimeError("torch.onnx.export returned no program")
    program.save(str(path), external_data=False)
    proto = onnx.load(str(path))
    for node in proto.graph.node:
        del node.metadata_props[:]
    onnx.save(proto, str(path))
    onnx.checker.check_model(proto, full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs, strict=True)}
    with torch.no_grad():
        expected = module(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for got, ref in zip(session.run(None, feeds), expected, strict=True):
        scale = max(float(ref.abs().max()), 1.0)
        error = float(np.abs(got - ref.numpy()).max()) / scale
        if not math.isfinite(error) or error > TOLERANCE:
            raise RuntimeError(f"onnxruntime differs from PyTorch by {error:.2e}")
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    ops = Counter(node.op_type for node in proto.graph.node)
    top = ", ".join(f"{op} {n}" for op, n in ops.most_common(6))
    size = path.stat().st_size / 1e6
    return f"{size:.1f} MB, opset {opset}, {len(proto.graph.node)} nodes ({top})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="torch model names (default: all)")
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--force", action="store_true", help="export even if the file is ok")
    args = parser.parse_args()
    suite = load_suite()
    try:
        models = [m for m in suite.select(args.models) if m.source == "torch"]
    except KeyError as error:
        parser.error(str(error))
    missing = [p for p in ("torch", "torchvision", "onnxscript") if not importlib.util.find_spec(p)]
    if missing:
        print(f"skipping the {len(models)} torch models: {', '.join(missing)} not installed")
        return
    for drift in toolchain_drift(suite):
        print(f"warning: {drift}; the exported files will not match their sha256")
    args.cache.mkdir(parents=True, exist_ok=True)
    failures = 0
    for model in models:
        if not args.force and problem(model, args.cache) is None:
            print(f"{model.name:<24} ok (cached)")
            continue
        try:
            summary = export(model, args.cache)
        except Exception as error:  # an exporter failure is reported, the rest go on
            print(f"{model.name:<24} export failed: {type(error).__name__}: {error}")
            failures += 1
            continue
        why = problem(model, args.cache)
        print(f"{model.name:<24} {summary}; {'ok' if why is None else why}")
        failures += why is not None
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
