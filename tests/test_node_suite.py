"""ONNX's node test suite, generated from the installed onnx's case definitions, per codegen.

Every case is imported with its data's input shapes and run (see ``tests/node_suite.py``):

- on cpu@numpy, every node;
- on OpenCL, every node the OpenCL codegen supports on ``opencl:0``, the others falling
  back to cpu@numpy (as ``autopart run --assign re:.*=opencl:0@opencl`` does); cases where
  it supports no node, where numpy cannot run the others, or that the import refuses, are
  skipped (the numpy list has those), so that its list holds OpenCL's refusals alone;
- on onnxruntime, every node in one cpu@onnxruntime session; import refusals are skipped.

A case passes, or is refused with an :class:`AutopartError` whose one-line message the
codegen's list in ``tests/data`` records, or (onnxruntime only) computes a wrong answer that
onnxruntime alone computes on the case's own model too, listed as ``wrong-in-onnxruntime``.
The test fails on a traceback, any other wrong answer, an outcome the list does not record,
and a listed case that now passes or ends otherwise: the lists stay honest.

Regenerate the lists after a deliberate change with
``AUTOPART_UPDATE_REFUSALS=1 python -m pytest tests/test_node_suite.py``; that records the
refusals and known-wrong answers seen and still fails on crashes and other wrong answers.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from autopart.targets.onnxruntime.codegen import HAVE_ONNXRUNTIME
from autopart.targets.opencl.device import discover_opencl_devices
from tests.node_suite import (
    DATA,
    LISTED_KINDS,
    Outcome,
    cases,
    counts,
    on_numpy,
    on_opencl,
    problems,
    run_case,
    run_on_onnxruntime,
    write_listed,
)

UPDATE = os.environ.get("AUTOPART_UPDATE_REFUSALS") == "1"
LISTS = {
    "numpy": DATA / "node_suite_refusals.csv",
    "opencl": DATA / "node_suite_refusals_opencl.csv",
    "onnxruntime": DATA / "node_suite_refusals_onnxruntime.csv",
}


def _check(codegen: str, run: Callable[[str], Outcome], half: int | None = None) -> None:
    """Run the cases, or one ``half`` of them (every other case by name: 0 or 1), and check.

    Regenerating the lists (``UPDATE``) always runs every case, in the first half's test.
    """
    if UPDATE and half:
        pytest.skip("the first half regenerates the whole list")
    all_cases = cases()
    assert len(all_cases) > 1000, "expected onnx's node test cases"
    ordered = sorted(all_cases)
    chosen = ordered if UPDATE or half is None else ordered[half::2]
    outcomes = {name: run(name) for name in chosen}
    path = LISTS[codegen]
    if UPDATE:
        write_listed(path, outcomes, kind_column=codegen != "numpy")
    found = problems(outcomes, path)
    assert not found, f"{len(found)} problems ({counts(outcomes)}):\n" + "\n".join(found)


HALVES = [
    pytest.param(0, id="first-half"),
    pytest.param(1, id="second-half", marks=pytest.mark.slow),
]  # every other case in each tier (the default tier and the slow one); CI runs both


@pytest.mark.parametrize("half", HALVES)
def test_node_suite_on_numpy(half: int) -> None:
    """Every case passes or is refused exactly as the numpy list says; nothing crashes."""
    _check("numpy", lambda name: run_case(name, on_numpy), half)


@pytest.mark.skipif(not discover_opencl_devices(), reason="no OpenCL device")
@pytest.mark.parametrize("half", HALVES)
def test_node_suite_on_opencl(half: int) -> None:
    """Cases with OpenCL nodes pass or are refused as the OpenCL list says; none is wrong.

    Every other case in each tier (the default tier and the slow one): PoCL compiles a
    kernel per case, 88 s for all on a 2-core AVX2-only CPU; CI runs both halves.
    """
    _check("opencl", lambda name: run_case(name, on_opencl, graph_errors_refuse=False), half)


@pytest.mark.skipif(not HAVE_ONNXRUNTIME, reason="onnxruntime is not installed")
@pytest.mark.parametrize("half", HALVES)
def test_node_suite_on_onnxruntime(half: int) -> None:
    """Cases pass, are refused, or are onnxruntime's own wrong answers, as listed."""
    _check("onnxruntime", run_on_onnxruntime, half)


@pytest.mark.parametrize("codegen", sorted(LISTS))
def test_lists_give_reasons(codegen: str) -> None:
    """Each listed case appears once, with a known kind and a one-line reason."""
    path: Path = LISTS[codegen]
    if not path.is_file():
        pytest.skip("no list yet")
    rows = list(csv.DictReader(path.open(newline="")))
    names = [row["case"] for row in rows]
    assert len(names) == len(set(names))
    assert all(row["reason"].strip() and "\n" not in row["reason"] for row in rows)
    assert all((row.get("kind") or "refused") in LISTED_KINDS for row in rows)
    if codegen != "onnxruntime":
        assert all((row.get("kind") or "refused") == "refused" for row in rows)
