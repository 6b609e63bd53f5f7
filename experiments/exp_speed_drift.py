"""Experiment: does a profile taken while the machine was slower price right at today's speed?

``autopart.profile.speed`` stamps every measuring run with the machine's speed (a fixed
probe on one core and on every core) and scales a profile's rows to the speed measured when
a tune starts. This experiment makes the machine slower on purpose and checks the scaling:

1. **slow**: one spinning process per core (ordinary priority) shares the cores while
   ``autopart tune`` profiles the model in a fresh profile folder, times its candidates'
   partitions whole and races them; every row it writes is stamped at that speed;
2. **quiet**: the spinners stop and the model is tuned again from that profile. Its
   candidates are priced twice, scaled to the speed now (what ``tune`` does) and as measured
   (the probe off), each against what the race measures now;
3. **repeatability**: the speed is measured ``--repeats`` times back to back, quiet: the
   spread between two consecutive speeds is what ``SPEED.deadband`` must stay above.

Writes ``experiments/results/speed_drift.csv`` (per model and candidate) and
``speed_repeat.csv``. Run it on a quiet machine.

    python experiments/exp_speed_drift.py [--models squeezenet shufflenet] [--rounds 8]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
from _common import show, write_csv

from autopart import api
from autopart.profile.speed import measure_speed
from autopart.tuning.options import TuneOptions
from autopart.tuning.workflow import prepare

TARGETS = ["cpu@onnxruntime", "cpu/0@onnxruntime", "cpu@openvino", "cpu@openvino:bf16"]


@contextmanager
def spinning() -> Iterator[None]:
    """One busy process per core while the block runs."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def model_rows(model: str, rounds: int, folder: Path) -> list[dict]:
    """One row per candidate of ``model``: predicted scaled and as measured, and measured."""
    options = TuneOptions(
        targets=TARGETS, profiles_dir=str(folder / "profiles"),
        search_dir=str(folder / "search"), rounds=rounds, peers=False,
    )  # fmt: skip
    with spinning():
        slow = measure_speed()
        api.tune(model, options)
    quiet = measure_speed()
    with mock.patch("autopart.tuning.workflow.measure_speed", lambda: None):
        unscaled = prepare(model, options).outcome
    as_measured = {name: c.value(unscaled.objective) for name, c in unscaled.candidates.items()}
    report = api.tune(model, options)
    scaled = [note for note in report.notes if note.startswith("priced at today's speed")]
    rows = []
    for row in report.rows:
        if row.measured_s is None:
            continue
        rows.append(
            {
                "model": model,
                "candidate": row.name,
                "measured_ms": row.measured_s * 1e3,
                "scaled_ms": row.predicted_s * 1e3,
                "as_measured_ms": as_measured.get(row.name, np.nan) * 1e3,
                "scaled_vs_measured": row.predicted_s / row.measured_s,
                "as_measured_vs_measured": as_measured.get(row.name, np.nan) / row.measured_s,
                "slow_one_core_ms": slow.one_core_s * 1e3 if slow else np.nan,
                "slow_every_core_ms": slow.every_core_s * 1e3 if slow else np.nan,
                "quiet_one_core_ms": quiet.one_core_s * 1e3 if quiet else np.nan,
                "quiet_every_core_ms": quiet.every_core_s * 1e3 if quiet else np.nan,
                "chosen": row.name == report.chosen,
                "note": scaled[0] if scaled else "",
            }
        )
    return rows


def repeat_rows(repeats: int) -> pd.DataFrame:
    """``repeats`` speeds back to back, and each one's change from the one before."""
    speeds = [measure_speed() for _ in range(repeats)]
    frame = pd.DataFrame(
        [
            {"one_core_ms": s.one_core_s * 1e3, "every_core_ms": s.every_core_s * 1e3}
            for s in speeds
            if s is not None
        ]
    )
    for column in ("one_core_ms", "every_core_ms"):
        frame[column.replace("_ms", "_change")] = (frame[column] / frame[column].shift()) - 1
    return frame


def main() -> None:
    """Run both parts, write the CSVs and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["squeezenet", "shufflenet"])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=60)
    args = parser.parse_args()
    repeats = repeat_rows(args.repeats)
    write_csv(repeats, "speed_repeat.csv")
    changes = repeats[["one_core_change", "every_core_change"]].abs()
    show("change between consecutive speeds (quantiles)", changes.quantile([0.5, 0.9, 0.99]))
    rows = []
    for model in args.models:
        with tempfile.TemporaryDirectory(prefix="autopart-speed-") as folder:
            rows.extend(model_rows(model, args.rounds, Path(folder)))
    table = pd.DataFrame(rows)
    write_csv(table, "speed_drift.csv")
    shown = ["model", "candidate", "measured_ms", "scaled_vs_measured", "as_measured_vs_measured"]
    show("a profile taken at half speed, priced now", table[shown])


if __name__ == "__main__":
    main()
