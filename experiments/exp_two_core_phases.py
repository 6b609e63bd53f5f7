"""Experiment: spells in which a runner on both cores slows down and one on one core does not.

A tune's race of shufflenet at ``--tolerance 0.5x`` measured onnxruntime alone at 5.70 ms
and OpenVINO f32 on both cores at 4.66 ms, where ``bench`` in the same process, minutes
later, measured 2.65 and 2.67; the runners pinned to one core measured within 5-9% of the
bench. The race then kept a one-core plan that the bench timed at 1.56x the best peer.

This script looks for such spells outside autopart: one process alternates, for
``--seconds`` seconds, blocks of onnxruntime at its defaults (both cores) and of
onnxruntime with one intra-op thread, on the same model and inputs; each block is the
median of ``--runs`` runs. A fresh session of each opens every ``--fresh`` blocks (the
slow spells were first seen on fresh sessions). Per block it reports the ratio of the two
medians; a spell is a run of blocks whose two-core time exceeds the spread of the quiet
ones.

Writes ``experiments/results/two_core_phases.csv``. Run it on an otherwise idle machine.

    python experiments/exp_two_core_phases.py [--model shufflenet] [--seconds 120]
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
from _common import median_ms, model_and_feeds, ort_session, show, write_csv


def main() -> None:
    """Alternate two-core and one-core blocks for the time asked; write and show them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="shufflenet")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--fresh", type=int, default=10)
    args = parser.parse_args()
    model, feeds = model_and_feeds(args.model)
    started, rows, block = time.perf_counter(), [], 0
    both = one = None
    while time.perf_counter() - started < args.seconds:
        if block % args.fresh == 0:
            both, one = ort_session(model), ort_session(model, 1)
        assert both is not None and one is not None
        two_ms = median_ms(lambda s=both: s.run(None, feeds), args.runs, warmup=5)
        one_ms = median_ms(lambda s=one: s.run(None, feeds), args.runs, warmup=5)
        elapsed = round(time.perf_counter() - started, 2)
        rows.append({"block": block, "t_s": elapsed, "fresh": block % args.fresh == 0,
                     "both_cores_ms": round(two_ms, 3), "one_core_ms": round(one_ms, 3),
                     "ratio": round(two_ms / one_ms, 3)})  # fmt: skip
        block += 1
    frame = pd.DataFrame(rows)
    quiet = float(frame["both_cores_ms"].quantile(0.25))
    frame["slow"] = frame["both_cores_ms"] > 1.3 * quiet
    write_csv(frame, "two_core_phases.csv")
    show("two-core against one-core blocks", frame)
    by_spell = frame.groupby("slow")[["both_cores_ms", "one_core_ms"]].median()
    print(f"blocks: {len(frame)}; slow (two-core > 1.3x its lower quartile): "
          f"{int(frame['slow'].sum())}")  # fmt: skip
    show("medians by spell (slow: True)", by_spell.reset_index())


if __name__ == "__main__":
    main()
