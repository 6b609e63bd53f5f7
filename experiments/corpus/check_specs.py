"""Check that every corpus model's input specs make it run: onnxruntime alone, finite outputs.

Each model (fetched by ``fetch.py``) runs once on onnxruntime's CPU provider with default
options, on inputs drawn from its specs (seed 0; frozen inputs fed their values). One line
per model: ok (with the run's milliseconds), not finite (an output holds NaN or inf), or
failed. This is the check the manifests were written against.

    python experiments/corpus/check_specs.py                  # every model
    python experiments/corpus/check_specs.py 'w_*'            # the wheel models
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from corpus import CorpusModel, load_corpus, make_inputs, problem, select


def run(model: CorpusModel) -> tuple[str, float]:
    """Run ``model`` once on its spec inputs: (status, wall milliseconds of the run)."""
    import onnxruntime as ort

    feeds = make_inputs(model)
    session = ort.InferenceSession(str(model.path()), providers=["CPUExecutionProvider"])
    start = time.perf_counter()
    outputs = session.run(None, feeds)
    elapsed = (time.perf_counter() - start) * 1000.0
    bad = [
        out.name
        for out, value in zip(session.get_outputs(), outputs, strict=True)
        if np.asarray(value).dtype.kind in "fc" and not np.isfinite(value).all()
    ]
    return ("ok" if not bad else f"not finite: {', '.join(bad)}"), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="names, or prefixes ending in * (default: all)")
    args = parser.parse_args()
    models = select(load_corpus(), args.models)
    failures = 0
    for model in models:
        why = problem(model)
        if why is None:
            try:
                status, elapsed = run(model)
            except Exception as error:  # onnxruntime raises its own exception types
                status, elapsed = f"failed: {str(error).splitlines()[0][:160]}", 0.0
        else:
            status, elapsed = f"failed: {why}", 0.0
        failures += status != "ok"
        print(f"{model.name:<36} {status:<12} {elapsed:10.1f} ms", flush=True)
    print(f"{len(models) - failures} of {len(models)} models ok")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
