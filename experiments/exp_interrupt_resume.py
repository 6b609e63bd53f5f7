"""Experiment: does a rerun measure only what interrupted runs left unfinished?

Issue 31's Done-when: "Of three runs interrupted at 8 s, the rerun measures only what had
not been finished." Three ``autopart profile`` runs of one model into one fresh profile
folder are stopped ``--after`` seconds in, by SIGINT, SIGTERM and SIGKILL in turn; each
continues where the previous one stopped. After each, the profile on disk is read back
(:class:`autopart.profile.Profile`): its complete rows, and the rows holding k of n
passes. A fourth run goes to the end. Its report must reuse every complete row, resume the
partial ones for the passes they lack, and measure the rest: nothing finished is measured
again. A clean run into another fresh folder gives the total to compare with.

Writes experiments/results/interrupt_resume.csv (one row per run) and prints it.

    python experiments/exp_interrupt_resume.py [--model squeezenet] [--after 8]
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from _common import console, show, write_csv

from autopart.profile import Profile, machine_profile_path
from autopart.targets.devices import discover

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
COUNTS = re.compile(r"(\d+) new measurements, (\d+) reused")
RESUMED = re.compile(r"(\d+) measurements took only the passes they lacked")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="squeezenet")
    parser.add_argument("--after", type=float, default=8.0, help="seconds before the signal")
    return parser.parse_args()


def profile_run(model: str, folder: Path, stop: signal.Signals | None, after: float) -> dict:
    """One ``autopart profile`` run, signalled ``after`` seconds in unless ``stop`` is None."""
    command = [sys.executable, "-m", "autopart", "profile", model, "--profiles", str(folder)]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if stop is not None:
        try:
            process.wait(timeout=after)
        except subprocess.TimeoutExpired:
            process.send_signal(stop)
    output, _ = process.communicate()
    found = COUNTS.search(output)
    last = output.strip().splitlines()[-1] if output.strip() else ""
    return {
        "signal": "none" if stop is None else stop.name,
        "exit": process.returncode,
        "seconds": round(time.perf_counter() - started, 1),
        "new": int(found.group(1)) if found else None,
        "reused": int(found.group(2)) if found else None,
        "resumed": int(resumed.group(1)) if (resumed := RESUMED.search(output)) else 0,
        "last_line": last[:160],
    }


def on_disk(folder: Path) -> dict:
    """The profile's rows now: complete ones, and those holding only some of their passes."""
    path = machine_profile_path(folder, discover())
    if not path.exists():
        return {"rows": 0, "complete": 0, "partial": 0, "dropped": 0}
    profile = Profile.load(path)
    rows = profile.table
    partial = int((rows["partial"].fillna("").astype(str) != "").sum())
    return {
        "rows": len(rows),
        "complete": len(rows) - partial,
        "partial": partial,
        "dropped": profile.dropped.count,
    }


def main() -> None:
    args = arguments()
    records = []
    with tempfile.TemporaryDirectory() as work:
        folder, clean = Path(work) / "interrupted", Path(work) / "clean"
        for stop in [*SIGNALS, None]:
            before = on_disk(folder)
            run = profile_run(args.model, folder, stop, args.after)
            after = on_disk(folder)
            records.append({"run": len(records) + 1, **run,
                            **{f"before_{k}": v for k, v in before.items()},
                            **{f"after_{k}": v for k, v in after.items()}})  # fmt: skip
            console.print(records[-1])
        records.append({"run": "clean", **profile_run(args.model, clean, None, 0.0),
                        **{f"after_{k}": v for k, v in on_disk(clean).items()}})  # fmt: skip
    table = pd.DataFrame(records)
    console.print(f"wrote {write_csv(table, 'interrupt_resume.csv')}")
    shown = ["run", "signal", "exit", "seconds", "new", "reused", "resumed", "before_complete",
             "before_partial", "after_complete", "after_partial", "after_dropped"]  # fmt: skip
    show(f"{args.model}: three runs stopped at {args.after:g} s, then a full one", table[shown])


if __name__ == "__main__":
    main()
