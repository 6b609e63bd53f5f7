"""SIGKILL a profile and a tune at many moments; every rerun must reuse exactly what finished.

Issue 31, item 7: the kill suite (``tests/test_kill.py``, whose procedure is in
``tests/kill_harness.py``) at a larger N. ``autopart profile`` and ``autopart tune`` of a
tiny model run as real processes and are SIGKILLed at seeded random moments over their
expected span, in chains (kill, kill, ..., then one rerun through the API, for its report),
and inside the n-th checkpoint write of the profile and the write of tune's plan. A case
ends in ``reuse`` when the file the kill left was whole (no row dropped, a saved plan the
old one or a whole new one) and the rerun reused exactly the jobs it held finished, took
only the passes the jobs cut short lacked, measured the rest and left every finished row
as it was; in ``error: ...`` when the rerun refused cleanly (one line); else in ``FAIL``.

Writes ``results/fault_kill.csv`` (one row per kill) and prints a summary. Run from the
repository root: ``python experiments/fault_kill.py`` (a few minutes).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's autopart, and the tests' harness

from tests.kill_harness import (  # noqa: E402
    Case,
    failures,
    make_world,
    plan_write_kill,
    profile_chain,
    profile_write_kill,
    tune_chain,
    tune_write_kill,
)

RESULTS = Path(__file__).parent / "results"


def chain_lengths(kills: int, lengths: tuple[int, ...]) -> Iterator[int]:
    """Chain lengths cycling through ``lengths`` that add up to ``kills``."""
    left = kills
    for length in itertools.cycle(lengths):
        if left <= 0:
            return
        yield min(length, left)
        left -= length


def run(root: Path, args: argparse.Namespace) -> list[Case]:
    """Every case: profile chains, tune chains, kills inside the profile's (by a profile and
    by a tune) and the plan's writes."""
    console = Console(stderr=True)
    world = make_world(root)
    rng = np.random.default_rng(args.seed)
    cases: list[Case] = []
    for chain, kills in enumerate(chain_lengths(args.profile_kills, (1, 2, 3))):
        cases += profile_chain(world, root / f"profile-{chain}", kills, chain, rng)
        console.print(f"profile chain {chain}: {[case.outcome for case in cases[-kills:]]}")
    for chain, kills in enumerate(chain_lengths(args.tune_kills, (1, 2))):
        cases += tune_chain(world, root / f"tune-{chain}", kills, chain, rng)
        console.print(f"tune chain {chain}: {[case.outcome for case in cases[-kills:]]}")
    for chain, nth in enumerate(args.writes):
        cases.append(profile_write_kill(world, root / f"write-{chain}", nth))
        cases[-1].chain = chain
    for chain, nth in enumerate(args.tune_writes):
        cases.append(tune_write_kill(world, root / f"tune-write-{chain}", nth))
        cases[-1].chain = chain
    for chain in range(args.plan_writes):
        cases.append(plan_write_kill(world, root / f"plan-{chain}"))
        cases[-1].chain = chain
    return cases


def summary(table: pd.DataFrame) -> Table:
    """Cases by what was killed: how they ended, what the file held, how the rerun did."""
    out = Table(
        "killed", "cases", "SIGKILLed", "ended first", "file absent", "rows cut short",
        "inside a write", "reruns", "reuse", "error line", "FAIL", title="kill suite",
    )  # fmt: skip
    for what, rows in table.groupby("what", sort=False):
        partial = ~rows["file"].str.endswith(" 0 partial") & (rows["file"] != "absent")
        outcomes = rows["outcome"]
        out.add_row(
            str(what), str(len(rows)), str(int(rows["killed"].sum())),
            str(int((~rows["killed"]).sum())), str(int((rows["file"] == "absent").sum())),
            str(int(partial.sum())), str(int((rows["stray"] > 0).sum())),
            str(int(rows["reused"].notna().sum())), str(int((outcomes == "reuse").sum())),
            str(int(outcomes.str.startswith("error").sum())), str(int((outcomes == "FAIL").sum())),
        )  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile-kills", type=int, default=60)
    parser.add_argument("--tune-kills", type=int, default=20)
    parser.add_argument(
        "--writes", type=int, nargs="*", default=list(range(1, 34, 3)),
        help="the profile's checkpoint writes to kill inside (1: the first)",
    )  # fmt: skip
    parser.add_argument(
        "--tune-writes", type=int, nargs="*", default=[1, 2, 4, 8, 16],
        help="a tune's profile writes to kill inside, from no profile (early: its screen)",
    )  # fmt: skip
    parser.add_argument("--plan-writes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--out", type=Path, default=RESULTS / "fault_kill.csv")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        cases = run(Path(folder), args)
    table = pd.DataFrame([asdict(case) for case in cases])
    table["problems"] = table["problems"].map("; ".join)
    counts = ["write", "reused", "resumed", "new"]
    table[counts] = table[counts].astype("Int64")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    console = Console(width=160)
    console.print(summary(table))
    ok = table["outcome"].eq("reuse") | table["outcome"].str.startswith("error")
    console.print(f"{int(ok.sum())} of {len(table)} cases ended in correct reuse or one error line")
    if not ok.all():
        console.print(failures(cases))
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
