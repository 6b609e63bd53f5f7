"""Digest of the plans and predictions autopart makes from one profile, for before/after checks.

Run ``python scripts/plan_digest.py PROFILE.csv OUT.json`` on two revisions and compare the
JSON files (``--compare OTHER.json`` does it): a refactor that keeps behaviour gives the same
chosen plan, assignment and predicted seconds for every zoo model and every candidate.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import autopart
from autopart.costmodel import costs_from_profile
from autopart.profile import Profile
from autopart.search.options import Method, Objective, SearchOptions
from autopart.search.planner import search


def digest(profile_path: Path) -> dict[str, object]:
    profile = Profile.load(profile_path)
    out: dict[str, object] = {}
    for name in autopart.zoo_names():
        graph = autopart.load(name)
        try:
            costs = costs_from_profile(graph, profile)
        except autopart.AutopartError as error:  # the profile lacks this model
            out[name] = {"error": str(error)}
            print(name, "skipped:", error, flush=True)
            continue
        options = SearchOptions(objective=Objective.LATENCY, method=Method.ILP, source=name)
        outcome = search(costs, options)
        out[name] = {
            "chosen": outcome.chosen.name,
            "candidates": {
                cname: {
                    "sequential_s": c.simulation.sequential_s,
                    "makespan_s": c.simulation.makespan_s,
                    "assignment": {k: str(v) for k, v in sorted(c.assignment.items())},
                }
                for cname, c in sorted(outcome.candidates.items())
            },
            "node_costs": {
                node: {str(t): s for t, s in sorted(entry.items(), key=lambda kv: str(kv[0]))}
                for node, entry in sorted(costs.node_cost.items())
            },
        }
        print(name, outcome.chosen.name, outcome.chosen.simulation.sequential_s, flush=True)
    return out


def differences(a: object, b: object, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        found = [f"{path}/{k}: only in one" for k in set(a) ^ set(b)]
        for key in sorted(set(a) & set(b)):
            found += differences(a[key], b[key], f"{path}/{key}")
        return found
    if isinstance(a, float) and isinstance(b, float):
        return [] if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15) else [f"{path}: {a} != {b}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("profile", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--compare", type=Path, help="a digest to compare with")
    args = parser.parse_args()
    result = digest(args.profile)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True))
    if args.compare:
        found = differences(json.loads(args.compare.read_text()), result)
        print(f"{len(found)} differences")
        for line in found[:50]:
            print(" ", line)
        sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
