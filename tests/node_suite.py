"""Running ONNX's node test cases on one codegen, and the lists of expected outcomes.

A case ends as one :class:`Outcome`: ``passed`` (every output matches the case's expected
output within its rtol/atol, with the same dtype and shape), ``refused`` (an
:class:`AutopartError`, with its one-line message), ``wrong-in-onnxruntime`` (onnxruntime
computes a wrong answer, and onnxruntime alone on the case's own model computes it too),
``skipped`` (the case is not for this codegen) or ``failed`` (a traceback, or a wrong
answer of autopart's own). Each codegen's expected file lists the refused and known-wrong
cases with their reasons; :func:`problems` compares outcomes with it.
"""

from __future__ import annotations

import csv
import io
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from autopart.errors import AutopartError
from autopart.ir import load_graph
from autopart.ir.graph import Graph
from autopart.plan.assign import plan_from_rules
from autopart.runtime import Executor
from autopart.runtime.plan_executor import PlanExecutor
from autopart.targets.devices import discover
from autopart.targets.registry import get_codegen

DATA = Path(__file__).parent / "data"
LISTED_KINDS = ("refused", "wrong-in-onnxruntime")
ORT_WRONG = "wrong-in-onnxruntime"


@dataclass(frozen=True)
class Outcome:
    """How one case ended (see the module docstring) and why."""

    kind: str
    detail: str = ""


@cache
def cases() -> dict[str, object]:
    """Every node test case of the installed onnx, by name."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {case.name: case for case in node.collect_testcases(None)}


def _input_names(model: onnx.ModelProto) -> list[str]:
    initializers = {tensor.name for tensor in model.graph.initializer}
    return [info.name for info in model.graph.input if info.name not in initializers]


def compare(name: str, got: object, want: object, rtol: float, atol: float) -> str:
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
        lines = [line.strip() for line in str(error).strip().splitlines()]
        telling = [
            line
            for line in lines
            if line.startswith(("Mismatched", "Max absolute")) or "location mismatch" in line
        ]
        return f"output {name!r}: {'; '.join(telling) or lines[-1]}"
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


def _first_line(error: BaseException) -> str:
    text = str(error)
    return text.splitlines()[0] if text else ""


@cache
def _load(name: str, index: int) -> Graph | AutopartError:
    """Case ``name``'s graph for data set ``index``, or the refusal (shared by the codegens)."""
    case = cases()[name]
    raw_inputs = case.data_sets[index][0]  # type: ignore[attr-defined]
    feeds = dict(zip(_input_names(case.model), _tensors(raw_inputs) or [], strict=False))  # type: ignore[attr-defined]
    try:
        return load_graph(case.model, {key: array.shape for key, array in feeds.items()})  # type: ignore[attr-defined]
    except AutopartError as error:
        return error


# Runs a loaded graph on one codegen: its outputs, or None when the case is not for it.
Runner = Callable[[Graph, dict[str, np.ndarray]], dict[str, np.ndarray] | None]


def run_case(name: str, runner: Runner, graph_errors_refuse: bool = True) -> Outcome:
    """Run every data set of case ``name`` with ``runner`` and judge the outputs.

    Import refusals are ``refused`` with ``graph_errors_refuse`` (the numpy suite, which
    lists them) and ``skipped`` otherwise (they concern no codegen).
    """
    case = cases()[name]
    for index, (raw_inputs, raw_expected) in enumerate(case.data_sets):  # type: ignore[attr-defined]
        inputs, expected = _tensors(raw_inputs), _tensors(raw_expected)
        if inputs is None or expected is None:
            if graph_errors_refuse:
                return Outcome("refused", "sequence and optional values are not supported")
            return Outcome("skipped", "sequence or optional values")
        feeds = dict(zip(_input_names(case.model), inputs, strict=False))  # type: ignore[attr-defined]
        graph = _load(name, index)
        if isinstance(graph, AutopartError):
            if graph_errors_refuse:
                return Outcome("refused", _first_line(graph))
            return Outcome("skipped", "the model is refused on import")
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outputs = runner(graph, feeds)
        except AutopartError as error:
            return Outcome("refused", _first_line(error))
        except Exception as error:  # a traceback is what the suite catches
            return Outcome("failed", f"{type(error).__name__}: {error}".splitlines()[0])
        if outputs is None:
            return Outcome("skipped", "no node runs on this codegen")
        if len(outputs) != len(expected):
            return Outcome("failed", f"{len(outputs)} outputs, expected {len(expected)}")
        for output, want in zip(graph.outputs, expected, strict=True):
            problem = compare(output, outputs[output], want, case.rtol, case.atol)  # type: ignore[attr-defined]
            if problem:
                return Outcome("failed", f"wrong answer: {problem}")
    return Outcome("passed")


# -- the codegens -------------------------------------------------------------------------------
def on_numpy(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every node on cpu@numpy."""
    return Executor(graph).run(feeds).outputs


def on_onnxruntime(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every node in one onnxruntime session (refused when a node is not supported)."""
    return Executor(graph, "onnxruntime").run(feeds).outputs


OPENCL_TARGET = "opencl:0@opencl"


def on_opencl(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """Every node the OpenCL codegen supports on ``opencl:0``, the rest on cpu@numpy.

    Like ``autopart run --assign re:.*=opencl:0@opencl --fallback cpu@numpy``; None (the
    case is skipped) when the codegen supports none of the nodes, or when cpu@numpy cannot
    run one of the others (the numpy list has those cases).
    """
    codegen, fallback = get_codegen("opencl"), get_codegen("numpy")
    supported = [codegen.supports(node, graph) for node in graph.nodes]
    if not any(supported):
        return None
    if any(
        not ok and not fallback.supports(node, graph)
        for ok, node in zip(supported, graph.nodes, strict=True)
    ):
        return None
    machine = discover()
    plan = plan_from_rules(graph, [f"re:.*={OPENCL_TARGET}"], "cpu@numpy", "suite", machine)
    with PlanExecutor(plan, graph, machine) as executor:
        return executor.run(feeds, concurrent=False).outputs


def onnxruntime_alone_is_wrong(name: str) -> str:
    """What onnxruntime alone gets wrong on case ``name``'s own model ("" when nothing).

    The model goes to one onnxruntime session as it is, without autopart; an error of its
    own counts as wrong too.
    """
    import onnxruntime

    case = cases()[name]
    try:
        session = onnxruntime.InferenceSession(
            case.model.SerializeToString(),  # type: ignore[attr-defined]
            providers=["CPUExecutionProvider"],
        )
        names = [info.name for info in session.get_outputs()]
        for raw_inputs, raw_expected in case.data_sets:  # type: ignore[attr-defined]
            feeds = dict(zip(_input_names(case.model), _tensors(raw_inputs) or [], strict=False))  # type: ignore[attr-defined]
            got = session.run(None, feeds)
            for output, value, want in zip(names, got, _tensors(raw_expected) or [], strict=True):
                problem = compare(output, value, want, case.rtol, case.atol)  # type: ignore[attr-defined]
                if problem:
                    return problem
    except Exception as error:  # onnxruntime's own failure on the model
        return f"onnxruntime fails: {_first_line(error)}"
    return ""


def run_on_onnxruntime(name: str) -> Outcome:
    """Case ``name`` on onnxruntime; a wrong answer onnxruntime alone shares is its own."""
    outcome = run_case(name, on_onnxruntime, graph_errors_refuse=False)
    if outcome.kind == "failed" and outcome.detail.startswith("wrong answer"):
        alone = onnxruntime_alone_is_wrong(name)
        if alone.startswith("output"):
            return Outcome(ORT_WRONG, alone)
    return outcome


# -- the expected lists ------------------------------------------------------------------------
def read_listed(path: Path) -> dict[str, tuple[str, str]]:
    """``case -> (kind, reason)`` from ``path``; files without a kind column list refusals."""
    if not path.is_file():
        return {}
    with path.open(newline="") as handle:
        return {
            row["case"]: (row.get("kind") or "refused", row["reason"])
            for row in csv.DictReader(handle)
        }


def write_listed(path: Path, outcomes: dict[str, Outcome], kind_column: bool) -> None:
    """Record the refused and known-wrong outcomes in ``path``, sorted by case."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["case", "kind", "reason"] if kind_column else ["case", "reason"])
    for name in sorted(outcomes):
        outcome = outcomes[name]
        if outcome.kind in LISTED_KINDS:
            detail = outcome.detail.replace("\n", " ")
            writer.writerow([name, outcome.kind, detail] if kind_column else [name, detail])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(buffer.getvalue())


def problems(outcomes: dict[str, Outcome], path: Path) -> list[str]:
    """Every disagreement between ``outcomes`` and the list in ``path``, one line each."""
    listed = read_listed(path)
    found = []
    for name, outcome in sorted(outcomes.items()):
        if outcome.kind == "failed":
            found.append(f"{name}: {outcome.detail}")
        elif outcome.kind in LISTED_KINDS and listed.get(name) != (outcome.kind, outcome.detail):
            if outcome.kind == ORT_WRONG and listed.get(name, ("",))[0] == ORT_WRONG:
                continue  # onnxruntime's figures may differ by machine; its being wrong may not
            found.append(f"{name}: {outcome.kind}, not listed as such: {outcome.detail}")
        elif outcome.kind in ("passed", "skipped") and name in listed:
            found.append(f"{name}: {outcome.kind} now; remove it from {path.name}")
    found += [
        f"{name}: listed but not an onnx node case" for name in sorted(set(listed) - set(cases()))
    ]
    return found


def counts(outcomes: dict[str, Outcome]) -> dict[str, int]:
    """How many cases ended in each kind."""
    kinds = ("passed", "refused", ORT_WRONG, "skipped", "failed")
    return {kind: sum(o.kind == kind for o in outcomes.values()) for kind in kinds}
