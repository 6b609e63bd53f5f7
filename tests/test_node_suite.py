"""ONNX's node test suite, generated from the installed onnx's case definitions, on cpu@numpy.

Every case is imported with its data's input shapes and run through the numpy codegen.
A case either passes (every output matches within the case's rtol/atol, with the same dtype
and shape), or is refused with an :class:`AutopartError` whose one-line message is listed
in ``tests/data/node_suite_refusals.csv``. The test fails on a traceback (any other
exception), a wrong answer, a refusal that the file does not list, and a listed case that now
passes or is refused for another reason: the file stays an honest list.

Regenerate the file after a deliberate change with
``AUTOPART_UPDATE_REFUSALS=1 python -m pytest tests/test_node_suite.py``; it then records
the refusals seen and still fails on crashes and wrong answers.
"""

from __future__ import annotations

import csv
import io
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from autopart.errors import AutopartError
from autopart.ir import load_graph
from autopart.runtime import Executor

REFUSALS = Path(__file__).parent / "data" / "node_suite_refusals.csv"
UPDATE = os.environ.get("AUTOPART_UPDATE_REFUSALS") == "1"


@dataclass(frozen=True)
class Outcome:
    """How one case ended: ``passed``, ``refused`` (with the reason) or ``failed``."""

    kind: str
    detail: str = ""


@cache
def _cases() -> dict[str, object]:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {case.name: case for case in node.collect_testcases(None)}


def _expected_refusals() -> dict[str, str]:
    if not REFUSALS.is_file():
        return {}
    with REFUSALS.open(newline="") as handle:
        return {row["case"]: row["reason"] for row in csv.DictReader(handle)}


def _input_names(model: onnx.ModelProto) -> list[str]:
    initializers = {tensor.name for tensor in model.graph.initializer}
    return [info.name for info in model.graph.input if info.name not in initializers]


def _compare(name: str, got: object, want: object, rtol: float, atol: float) -> str:
    """An empty string when ``got`` matches ``want``, else what differs."""
    if not isinstance(want, np.ndarray):
        return f"output {name!r}: expected a {type(want).__name__}, a non-tensor output"
    got = np.asarray(got)
    if got.dtype != want.dtype:
        return f"output {name!r}: dtype {got.dtype} != {want.dtype}"
    if got.shape != want.shape:
        return f"output {name!r}: shape {got.shape} != {want.shape}"
    try:
        if want.dtype == object:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    except AssertionError as error:
        return f"output {name!r}: {str(error).strip().splitlines()[-1]}"
    return ""


def _tensors(values: Sequence[object]) -> list[np.ndarray] | None:
    """The case's values as arrays, or None when one is a sequence or an optional."""
    arrays = []
    for value in values:
        if isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        elif isinstance(value, np.generic):
            value = np.asarray(value)
        if not isinstance(value, np.ndarray):
            return None
        arrays.append(value)
    return arrays


def run_case(case: object) -> Outcome:
    """Run one onnx node test case on cpu@numpy through autopart's import and executor."""
    model: onnx.ModelProto = case.model  # type: ignore[attr-defined]
    names = _input_names(model)
    for raw_inputs, raw_expected in case.data_sets:  # type: ignore[attr-defined]
        inputs, expected = _tensors(raw_inputs), _tensors(raw_expected)
        if inputs is None or expected is None:
            return Outcome("refused", "sequence and optional values are not supported")
        feeds = dict(zip(names, inputs, strict=False))
        try:
            graph = load_graph(model, {name: array.shape for name, array in feeds.items()})
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outputs = Executor(graph).run(feeds).outputs
        except AutopartError as error:
            return Outcome("refused", str(error).splitlines()[0] if str(error) else "")
        except Exception as error:  # a traceback is what this test catches
            return Outcome("failed", f"{type(error).__name__}: {error}".splitlines()[0])
        if len(outputs) != len(expected):
            return Outcome("failed", f"{len(outputs)} outputs, expected {len(expected)}")
        for name, want in zip(graph.outputs, expected, strict=True):
            problem = _compare(name, outputs[name], want, case.rtol, case.atol)  # type: ignore[attr-defined]
            if problem:
                return Outcome("failed", f"wrong answer: {problem}")
    return Outcome("passed")


def _outcomes(names: Sequence[str]) -> dict[str, Outcome]:
    cases = _cases()
    return {name: run_case(cases[name]) for name in names}


def _write_refusals(outcomes: dict[str, Outcome]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["case", "reason"])
    for name in sorted(outcomes):
        if outcomes[name].kind == "refused":
            writer.writerow([name, outcomes[name].detail])
    REFUSALS.parent.mkdir(parents=True, exist_ok=True)
    REFUSALS.write_text(buffer.getvalue())


def test_node_suite_on_numpy() -> None:
    """Every case passes or is refused exactly as the refusals file says; nothing crashes."""
    cases = _cases()
    assert len(cases) > 1000, "expected onnx's node test cases"
    outcomes = _outcomes(sorted(cases))
    if UPDATE:
        _write_refusals(outcomes)
    listed = _expected_refusals()
    problems = []
    for name, outcome in sorted(outcomes.items()):
        if outcome.kind == "failed":
            problems.append(f"{name}: {outcome.detail}")
        elif outcome.kind == "refused" and listed.get(name) != outcome.detail:
            problems.append(f"{name}: refused, not listed as such: {outcome.detail}")
        elif outcome.kind == "passed" and name in listed:
            problems.append(f"{name}: passes now; remove it from {REFUSALS.name}")
    stale = sorted(set(listed) - set(cases))
    problems += [f"{name}: listed but not an onnx node case" for name in stale]
    counts = {kind: sum(o.kind == kind for o in outcomes.values()) for kind in ("passed",)}
    assert not problems, f"{len(problems)} problems ({counts}):\n" + "\n".join(problems)


def test_refusals_file_gives_reasons() -> None:
    """Each listed refusal names a case once and carries a one-line reason."""
    if not REFUSALS.is_file():
        pytest.skip("no refusals file yet")
    rows = list(csv.DictReader(REFUSALS.open(newline="")))
    names = [row["case"] for row in rows]
    assert len(names) == len(set(names))
    assert all(row["reason"].strip() and "\n" not in row["reason"] for row in rows)
