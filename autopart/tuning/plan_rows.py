"""The rows of a tune's report: one per candidate plan, saved as ``report.json`` and ``.csv``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from autopart.costmodel.accuracy import ErrorModel
from autopart.io import atomic_write_bytes
from autopart.ir.target import PRECISIONS, REFERENCE_PRECISION, VirtualDevice
from autopart.plan.schema import Plan
from autopart.search.candidates import Candidate, CandidateKind
from autopart.settings import settings_in_force
from autopart.tuning.metrics import AGREEMENT, TOPK
from autopart.tuning.settings import VERIFY
from autopart.tuning.settings_record import settings_groups
from autopart.tuning.verify import BUDGET_SPENT, Measured

REPORT_JSON, REPORT_CSV = "report.json", "report.csv"  # beside plan.json in the search folder


@dataclass
class PlanRow:
    """One candidate plan as the report shows it.

    ``kind`` and ``target`` are the candidate's (:class:`Candidate`); ``speedup`` is over the
    best single target, measured if measured, else predicted. ``max_error`` is the measured
    drop in the tune's metric, ``predicted_drop`` the drop the search predicted in that
    metric's units (None where its error model is in relative errors).
    """

    name: str
    kind: CandidateKind
    predicted_s: float
    measured_s: float | None
    speedup: float | None
    partitions: int
    copies: int
    memory_bytes: dict[str, int]
    max_error: float | None
    off_target_nodes: int = 0
    target: VirtualDevice | None = None
    predicted_drop: float | None = None

    def to_dict(self) -> dict[str, object]:
        """The row as plain data (kind and target as text), as the report files hold it."""
        return {
            **asdict(self),
            "kind": self.kind.value,
            "target": None if self.target is None else str(self.target),
        }

    @property
    def label(self) -> str:
        """The name as tables show it (:func:`plan_label`)."""
        return plan_label(self.name, self.off_target_nodes)


def plan_precisions(plan: Plan) -> str:
    """The precisions ``plan``'s nodes compute in, e.g. ``f32+bf16`` (f32 first).

    Read from the nodes' targets: a partition that mixes precisions names only f32.
    """
    found = {VirtualDevice.parse(t).computes_in for t in set(plan.assignment.values())}
    return "+".join(p for p in PRECISIONS if p in found) or REFERENCE_PRECISION


def plan_label(name: str, off_target_nodes: int) -> str:
    """``name``, followed by how many nodes a single-target plan runs off its target, if any."""
    if not off_target_nodes:
        return name
    return f"{name} (+{off_target_nodes} node{'s' * (off_target_nodes > 1)} on the fallback)"


def plan_rows(
    candidates: dict[str, Candidate],
    measured: dict[str, Measured],
    accuracy: ErrorModel | None = None,
) -> list[PlanRow]:
    """One row per candidate, measured ones by measured time, else by predicted time.

    Each row's predicted drop is ``accuracy``'s, where that is in a task metric's units.
    """
    in_units = accuracy if accuracy is not None and accuracy.metric is not None else None
    singles = [name for name, c in candidates.items() if c.kind.one_target]
    measured_singles = [measured[n].median_s for n in singles if n in measured]
    predicted_singles = [candidates[n].simulation.makespan_s for n in singles]
    rows = []
    for name, candidate in candidates.items():
        predicted = candidate.simulation.makespan_s
        result = measured.get(name)
        speedup: float | None
        if result is not None and measured_singles:
            speedup = min(measured_singles) / result.median_s
        elif result is None and predicted_singles:
            speedup = min(predicted_singles) / predicted if predicted else None
        else:
            speedup = None
        rows.append(
            PlanRow(
                name,
                candidate.kind,
                predicted,
                None if result is None else result.median_s,
                speedup,
                len(candidate.plan.partitions),
                len(candidate.plan.copies),
                {
                    device: s.weights_bytes + s.activation_peak_bytes
                    for device, s in candidate.plan.storage.items()
                },
                None if result is None else result.max_error,
                candidate.off_target_nodes,
                candidate.target,
                None if in_units is None else predicted_drop(in_units, candidate.assignment),
            )
        )
    key = (lambda r: r.measured_s) if measured else (lambda r: r.predicted_s)
    return sorted(rows, key=lambda r: (key(r) is None, key(r) or 0.0))


def predicted_drop(model: ErrorModel, assignment: Mapping[str, VirtualDevice]) -> float:
    """``model``'s error for ``assignment`` (relative, or its metric's drop), shown and saved.

    A share of answers is at most all of them.

    Each precision's weights are scaled to its drop with every node reduced, and they
    combine root-sum-square, so a plan of two reduced precisions can pass 100% of answers
    (a VGG16 classifier's int8 plan with bf16 around it showed 128%); the search compares
    the unbounded figure with the budget, which is the same test.
    """
    drop = model.predicted_error(assignment)
    return min(drop, 1.0) if model.metric in (AGREEMENT, TOPK) else drop


def _library(target: VirtualDevice) -> tuple[str | None, str | None, str | None]:
    """The library a single target runs: its host, codegen and precision (not its unit)."""
    return target.host, target.codegen, target.precision


def _together_gains(
    rows: Sequence[PlanRow], op_sums: Mapping[str, float]
) -> dict[tuple[str | None, str | None, str | None], dict[str, float]]:
    """Per library, each single target's ops summed over its whole timing, by row name."""
    gains: dict[tuple[str | None, str | None, str | None], dict[str, float]] = {}
    for row in rows:
        summed = op_sums.get(row.name)
        if row.kind is CandidateKind.SINGLE and row.target and summed and row.predicted_s > 0:
            gains.setdefault(_library(row.target), {})[row.name] = summed / row.predicted_s
    return gains


def _apart_from_its_library(row: PlanRow, gains: Mapping[str, float], limit: float) -> bool:
    """Whether the row's ops summed over timed whole is more than ``limit`` beyond its library's.

    A library runs a model's ops quicker together than apart by much the same ratio on each
    of its units; a ratio more than ``limit`` above every other unit's is its op rows' own
    (profiled in a slow spell), not the library's. With no other unit to compare, it cannot
    say, and answers False.
    """
    own = gains.get(row.name)
    others = [gain for name, gain in gains.items() if name != row.name]
    return own is not None and bool(others) and own > max(others) * (1 + limit)


def drift_note(
    rows: Sequence[PlanRow], model: str | Path, op_sums: Mapping[str, float] | None = None
) -> list[str]:
    """Notes naming the single targets whose prediction is over ``VERIFY.drift_limit`` off.

    The prediction is the row's op sum in ``op_sums`` where it has one (a partition timed
    whole prices the row from that timing, which says nothing of the op rows), else the
    row's own; where the two differ, the note gives both, and says the search priced the
    plan as timed whole (the table's prediction). Where that price is within the limit of
    the measurement and the ops summed are above it, the library runs them quicker together
    than apart, and the note says so, not that the profile drifted, unless the ratio of
    ops summed to timed whole is more than the limit above every other unit's of the same
    library (:func:`_apart_from_its_library`): then the op rows are off, as they are where
    they sum below the whole timing. Otherwise a profile taken in a slow or quick spell of
    a shared machine predicts every plan on that target off by as much; the note says how
    to measure it again. It cannot tell such drift from a bias of the cost model on that
    target, so it says both. Gaps under ``VERIFY.drift_floor_s`` are not noted: a model of
    a few microseconds swings by that much from one launch to the next, whatever the
    profile.
    """
    drifted: list[str] = []
    fused: list[str] = []
    targets: list[str] = []
    limit, floor_s = VERIFY.drift_limit, VERIFY.drift_floor_s
    gains = _together_gains(rows, op_sums or {})
    for row in rows:
        measured = row.measured_s
        if row.kind is not CandidateKind.SINGLE or not measured or row.target is None:
            continue
        predicted = (op_sums or {}).get(row.name, row.predicted_s)
        error = predicted / measured - 1
        if abs(error) <= limit or abs(predicted - measured) < floor_s:
            continue
        whole = row.predicted_s
        found = f"{measured * 1e3:.2f} measured ({error:+.0%})"
        if abs(predicted - whole) <= 1e-12:
            what = f"{row.target} {predicted * 1e3:.2f} ms predicted"
        else:
            what = (f"{row.target} {predicted * 1e3:.2f} ms summed over its ops, "
                    f"{whole * 1e3:.2f} ms timed whole (the price the search used)")  # fmt: skip
            library = gains.get(_library(row.target), {})
            quicker_together = predicted > whole and abs(whole / measured - 1) <= limit
            if quicker_together and not _apart_from_its_library(row, library, limit):
                fused.append(f"{what}, {found}")
                continue
        drifted.append(f"{what}, {found}")
        targets.append(str(row.target))
    return _drift_notes(drifted, fused, targets, model, limit)


def _drift_notes(
    drifted: Sequence[str], fused: Sequence[str], targets: Sequence[str], model: str | Path,
    limit: float,
) -> list[str]:  # fmt: skip
    """The drift note and the fusion note, each where it names any target."""
    notes = []
    if drifted:
        notes.append(
            f"the profile is more than {limit:.0%} off the measurement on {'; '.join(drifted)}. "
            "Either the machine was in a slow or quick spell when it was profiled "
            f"(`autopart profile {model} --targets {','.join(targets)} --refresh` measures "
            "again) or the cost model misses something on that target"
        )
    if fused:
        notes.append(
            f"the ops summed are more than {limit:.0%} off the measurement on "
            f"{'; '.join(fused)}; timed whole, the price the search used, is within it: "
            "the library runs these ops quicker together than apart"
        )
    return notes


def race_note(measured: Mapping[str, Measured], twins: Mapping[str, str]) -> list[str]:
    """A note naming the plans that raced on, if any did (they have the most rounds)."""
    rounds = {name: len(m.round_medians) for name, m in measured.items() if twins[name] == name}
    if not rounds or len(set(rounds.values())) < 2:
        return []
    most, least = max(rounds.values()), min(rounds.values())
    raced = sorted(name for name, count in rounds.items() if count == most)
    return [
        f"{' and '.join(raced)} raced on for {most - least} more rounds: their lead was unclear"
    ]


def failure_notes(failures: Mapping[str, str]) -> list[str]:
    """Notes on the runners not timed, from ``failures`` (why, by name).

    One note names the plans the wall budget left waiting for their heat; each other
    runner gets its own, with why it could not run.
    """
    waiting = sorted(name for name, why in failures.items() if why == BUDGET_SPENT)
    notes = [f"not raced, {BUDGET_SPENT}: {', '.join(waiting)}"] if waiting else []
    return notes + [
        f"{name} could not run, so it was not timed: {why}"
        for name, why in failures.items()
        if why != BUDGET_SPENT
    ]


def save_report(
    directory: Path,
    rows: list[PlanRow],
    chosen: str,
    pick: str,
    targets: list[str],
    fingerprint: str,
    notes: list[str],
    peers_s: dict[str, float] | None = None,
    versus: tuple[str | None, float | None] = (None, None),
) -> None:
    """Write ``report.json`` and ``report.csv``.

    ``report.json`` holds the choice, the targets, the profile, the notes, every row, the
    peers' measured medians in seconds (``peers``: onnxruntime alone, openvino alone, timed
    in the same rounds), ``versus`` as ``best_peer`` (the quickest peer within the tolerance)
    and ``vs_best_peer`` (the chosen plan over it, in the rounds both ran:
    :attr:`~autopart.tuning.tune_report.TuneReport.vs_best_peer`), null where there is none,
    and the machine-tuned settings in force: every group of
    :func:`~autopart.tuning.settings_record.settings_groups`, by
    :func:`autopart.settings.settings_in_force`.
    """
    document = {
        "chosen": chosen,
        "search_pick": pick,
        "targets": targets,
        "profile": fingerprint,
        "notes": notes,
        "plans": [row.to_dict() for row in rows],
        "peers": dict(peers_s or {}),
        "best_peer": versus[0],
        "vs_best_peer": versus[1],
        "settings": settings_in_force(settings_groups()),
    }
    atomic_write_bytes(directory / REPORT_JSON, (json.dumps(document, indent=1) + "\n").encode())
    table = pd.DataFrame([row.to_dict() for row in rows])
    table["memory_bytes"] = table["memory_bytes"].map(
        lambda m: ";".join(f"{k}={v}" for k, v in m.items())
    )
    atomic_write_bytes(directory / REPORT_CSV, table.to_csv(index=False).encode())
