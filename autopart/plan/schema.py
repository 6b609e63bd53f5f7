"""The plan document: a versioned, human-readable JSON record of where everything runs.

A plan is data only. Loading checks the schema, the JSON shape, the types of the recorded
prediction and measurement, and internal consistency;
:func:`autopart.plan.validate.validate_plan` checks it against a graph and a machine.
Plans are never pickled.

Version 2 types the two result records: ``predicted`` is a :class:`Prediction` and
``measured`` a :class:`MeasuredRun`. Version 1 kept them as free dicts of the same JSON
shape; loading one converts them (keys that version 2 does not know are dropped).

A saved plan proves it is whole: :meth:`Plan.save` adds ``check``, the digest of the rest of
the document's content (:func:`autopart.io.json_digest`), and :meth:`Plan.load` refuses a
plan whose content does not match it. A plan without ``check`` (written by hand, or
before checks) is read as it is.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autopart.io import atomic_write_bytes, json_digest, parse_json, read_document
from autopart.plan.fields import PlanError, Reader

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "BufferSpec",
    "CopySpec",
    "DeviceStorage",
    "IlpSummary",
    "MeasuredRun",
    "ModelRef",
    "PartitionSpec",
    "Plan",
    "PlanError",
    "Prediction",
    "ScheduleStep",
]

SCHEMA = "autopart.plan"
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
CHECK = "check"  # the key of the digest of the rest of a saved document


@dataclass
class ModelRef:
    """Which model a plan is for: how to load it, and the hash of its imported graph.

    ``input_shapes`` are the static shapes of its inputs and ``frozen`` the values of the
    inputs frozen at import (a number or a nested list of numbers each), so that loading
    ``source`` with both gives the same graph.
    """

    name: str
    source: str
    hash: str
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    frozen: dict[str, Any] = field(default_factory=dict)


@dataclass
class PartitionSpec:
    """A subgraph: its nodes (topological order), target, boundary values and predecessors."""

    id: str
    target: str
    nodes: list[str]
    inputs: list[str]
    outputs: list[str]
    after: list[str] = field(default_factory=list)


@dataclass
class CopySpec:
    """A copy node: moves ``value`` from device ``src`` to device ``dst``."""

    id: str
    value: str
    src: str
    dst: str
    nbytes: int
    after: list[str] = field(default_factory=list)


@dataclass
class BufferSpec:
    """One buffer of one device and the boundary values that reuse it in turn."""

    id: int
    nbytes: int
    values: list[str]


@dataclass
class DeviceStorage:
    """Storage on one device: weights, planned activation buffers and their peak."""

    weights_bytes: int
    activation_peak_bytes: int
    buffers: list[BufferSpec]


@dataclass(frozen=True)
class ScheduleStep:
    """One step of a schedule: when it ran (or is predicted to run) and on which lane.

    Copies run on lanes named ``copy:SRC->DST``; partitions on ``DEVICE/UNIT`` (``*`` for
    the whole device), as :class:`autopart.runtime.plan_executor.StepTiming` names them.
    """

    step: str
    lane: str
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        """Seconds the step took."""
        return self.end_s - self.start_s


@dataclass(frozen=True)
class IlpSummary:
    """What the exact search reported: its answer's and its bound's seconds, gap and time."""

    objective_s: float
    bound_s: float
    gap: float
    optimal: bool
    solve_s: float


@dataclass
class Prediction:
    """A plan's predicted cost, as the search's simulator gave it (what ``show`` draws).

    ``objective`` is what the search ranked by (``latency``, ``makespan`` or ``pareto``);
    ``sequential_s`` the sum of every step's cost, ``makespan_s`` the end of the concurrent
    ``schedule``; ``node_costs`` every node's seconds by target text. ``profile`` names the
    machine profile the costs came from, ``method`` the search, ``candidate`` the chosen
    candidate and ``ilp`` the exact search's report; ``error`` the predicted output error
    against f32 (from the nodes' measured sensitivities, see
    :mod:`autopart.costmodel.accuracy`): the drop in the task metric ``error_metric`` names
    (``agreement``), or where that is None the largest relative error. A field a writer
    did not record is ``None`` (or empty); readers say so rather than guess.
    """

    objective: str | None = None
    sequential_s: float | None = None
    makespan_s: float | None = None
    schedule: list[ScheduleStep] = field(default_factory=list)
    node_costs: dict[str, dict[str, float]] = field(default_factory=dict)
    profile: str | None = None
    method: str | None = None
    candidate: str | None = None
    ilp: IlpSummary | None = None
    error: float | None = None
    error_metric: str | None = None

    @classmethod
    def from_dict(cls, document: Any, strict: bool = True) -> Prediction:
        """Read a ``predicted`` section; :class:`PlanError` names the first ill-typed field.

        With ``strict`` (version 2) unknown keys are refused; else they are dropped.
        """
        read = Reader(document, "predicted", strict, _field_names(cls))
        ilp = read.section("ilp", _field_names(IlpSummary))
        return cls(
            objective=read.text("objective"),
            sequential_s=read.seconds("sequential_s"),
            makespan_s=read.seconds("makespan_s"),
            schedule=_schedule(read, "schedule"),
            node_costs=read.nested_numbers("node_costs"),
            profile=read.text("profile"),
            method=read.text("method"),
            candidate=read.text("candidate"),
            ilp=None if ilp is None else _ilp_summary(ilp),
            error=read.number("error"),
            error_metric=read.text("error_metric"),
        )


@dataclass
class MeasuredRun:
    """A plan measured on the real targets (written by ``autopart tune``).

    ``median_s`` is the median of ``runs`` timed runs; ``round_medians_s`` one median per
    round of interleaved runs (the independent samples); ``max_error`` the drop in
    ``metric`` (a task metric's name, :mod:`autopart.tuning.metrics`; None: ``max-rel``, the
    largest relative output error) against the numpy reference (f32) over ``samples``
    (what it was judged on, e.g. "8 validation samples of 16 given"), and ``tolerance`` the
    largest drop it was held to; ``schedule`` the last run's step timings. A field a
    writer did not record is ``None`` (or empty).
    """

    median_s: float | None = None
    runs: int | None = None
    max_error: float | None = None
    round_medians_s: list[float] = field(default_factory=list)
    tolerance: float | None = None
    schedule: list[ScheduleStep] = field(default_factory=list)
    metric: str | None = None
    samples: str | None = None

    @classmethod
    def from_dict(cls, document: Any, strict: bool = True) -> MeasuredRun:
        """Read a ``measured`` section; :class:`PlanError` names the first ill-typed field.

        With ``strict`` (version 2) unknown keys are refused; else they are dropped.
        """
        read = Reader(document, "measured", strict, _field_names(cls))
        return cls(
            median_s=read.seconds("median_s"),
            runs=read.count("runs"),
            max_error=read.number("max_error", finite=False),
            round_medians_s=read.numbers("round_medians_s", minimum=0.0),
            tolerance=read.number("tolerance"),
            schedule=_schedule(read, "schedule"),
            metric=read.text("metric"),
            samples=read.text("samples"),
        )


def _field_names(cls: type) -> set[str]:
    return set(cls.__dataclass_fields__)  # type: ignore[attr-defined]


def _schedule(read: Reader, key: str) -> list[ScheduleStep]:
    steps = []
    for index, entry in enumerate(read.items(key)):
        item = read.child(entry, f"{key}[{index}]", _field_names(ScheduleStep))
        start, end = item.required_number("start_s"), item.required_number("end_s")
        if end < start:
            raise PlanError(f"plan field {item.where}: end_s {end} is before start_s {start}")
        steps.append(
            ScheduleStep(item.required_text("step"), item.required_text("lane"), start, end)
        )
    return steps


def _ilp_summary(read: Reader) -> IlpSummary:
    return IlpSummary(
        objective_s=read.required_number("objective_s", finite=False),
        bound_s=read.required_number("bound_s", finite=False),
        gap=read.required_number("gap", finite=False),
        optimal=read.required_flag("optimal"),
        solve_s=read.required_number("solve_s", finite=False),
    )


@dataclass
class Plan:
    """Every node's target, the partitions, the copy nodes, the storage and the predicted cost.

    ``assignment`` is every node's target text, as planning wrote it onto the graph's nodes
    (:func:`autopart.plan.build.place_plan` writes it back). ``order`` is one valid
    sequential schedule of the step ids (partitions ``p*`` and copies ``c*``); ``after``
    lists on each step give the dependencies that a concurrent executor honours.
    ``predicted`` is the search's :class:`Prediction` and ``measured`` a
    :class:`MeasuredRun` on the real targets; either may be ``None``.
    """

    model: ModelRef
    fallback: str
    assignment: dict[str, str]
    partitions: list[PartitionSpec]
    copies: list[CopySpec]
    order: list[str]
    storage: dict[str, DeviceStorage]
    predicted: Prediction | None = None
    notes: list[str] = field(default_factory=list)
    measured: MeasuredRun | None = None

    def tree(self) -> dict[str, dict[str, dict[str, list[str]]]]:
        """Partitions nested device -> unit ('*' for the whole device) -> codegen -> ids."""
        from autopart.ir.target import VirtualDevice

        tree: dict[str, dict[str, dict[str, list[str]]]] = {}
        for partition in self.partitions:
            target = VirtualDevice.parse(partition.target)
            unit = "*" if target.unit is None else str(target.unit)
            device = tree.setdefault(str(target.device), {})
            device.setdefault(unit, {}).setdefault(str(target.codegen), []).append(partition.id)
        return tree

    def step(self, step_id: str) -> PartitionSpec | CopySpec:
        """The partition or copy called ``step_id``."""
        for item in [*self.partitions, *self.copies]:
            if item.id == step_id:
                return item
        raise PlanError(f"plan has no step {step_id!r}")

    # -- serialisation ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON document, with the partition tree spelled out for readers."""
        document = {"schema": SCHEMA, "version": SCHEMA_VERSION, **asdict(self)}
        document["tree"] = self.tree()
        return document

    def save(self, path: str | Path) -> None:
        """Write the plan as indented JSON, atomically, ending with its ``check`` digest."""
        document = json.loads(json.dumps(self.to_dict()))  # as a reader will see it
        document[CHECK] = json_digest(document)
        atomic_write_bytes(path, (json.dumps(document, indent=1) + "\n").encode())

    @classmethod
    def from_dict(cls, document: Any) -> Plan:
        """Rebuild a plan from its JSON document; raise :class:`PlanError` when malformed."""
        if not isinstance(document, dict) or document.get("schema") != SCHEMA:
            raise PlanError("not an autopart plan (missing schema 'autopart.plan')")
        version = document.get("version")
        if version not in READABLE_VERSIONS or isinstance(version, bool):
            raise PlanError(
                f"plan schema version {version!r} is not supported (this autopart reads "
                f"{' and '.join(map(str, READABLE_VERSIONS))})"
            )
        strict = version == SCHEMA_VERSION
        missing = [key for key in _REQUIRED_KEYS if key not in document]
        if missing:
            raise PlanError(f"plan document is malformed: it has no {', '.join(missing)}")
        read = Reader(document, "plan", False, ())
        predicted, measured = document.get("predicted"), document.get("measured")
        plan = cls(
            model=_model_ref(read.child(read.mapping("model"), "model", _field_names(ModelRef))),
            fallback=read.target("fallback"),
            assignment=read.text_mapping("assignment"),
            partitions=[_partition(p) for p in read.objects("partitions", _PARTITION_KEYS)],
            copies=[_copy(c) for c in read.objects("copies", _field_names(CopySpec))],
            order=read.strings("order"),
            storage={
                str(device): _storage(read.child(entry, f"storage.{device}", _STORAGE_KEYS))
                for device, entry in read.mapping("storage").items()
            },
            predicted=None if predicted is None else Prediction.from_dict(predicted, strict),
            notes=read.strings("notes"),
            measured=None if measured is None else MeasuredRun.from_dict(measured, strict),
        )
        if document.get("tree") is not None and document["tree"] != plan.tree():
            raise PlanError("plan's partition tree disagrees with its partitions (edited by hand?)")
        return plan

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """Read a plan file; corrupt, damaged or foreign files raise :class:`PlanError`.

        A document whose ``check`` does not match its content is damaged (cut short,
        changed on disk, or edited by hand): the error names the file.
        """
        text = read_document(path, "plan file", PlanError)
        document = parse_json(text, f"{path} is not a readable plan: ", PlanError)
        if isinstance(document, dict) and CHECK in document:
            check = document.pop(CHECK)
            if check != json_digest(document):
                raise PlanError(
                    f"plan file {path} is damaged: its content does not match its check "
                    f"(if you edited it by hand, delete its {CHECK!r} field)"
                )
        return cls.from_dict(document)


_REQUIRED_KEYS = ("model", "fallback", "assignment", "partitions", "copies", "order", "storage")
_PARTITION_KEYS = ("id", "target", "nodes", "inputs", "outputs", "after")
_STORAGE_KEYS = ("weights_bytes", "activation_peak_bytes", "buffers")


def _model_ref(read: Reader) -> ModelRef:
    shapes = read.mapping("input_shapes")
    for name, dims in shapes.items():
        if not isinstance(dims, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims
        ):
            raise PlanError(f"plan field model.input_shapes.{name} must be a list of dims >= 0")
    frozen = read.mapping("frozen")
    for name, value in frozen.items():
        if not _numbers(value):
            raise PlanError(f"plan field model.frozen.{name} must be a number or list of numbers")
    return ModelRef(
        read.required_text("name"), read.required_text("source"), read.required_text("hash"),
        {str(name): list(dims) for name, dims in shapes.items()},
        {str(name): value for name, value in frozen.items()},
    )  # fmt: skip


def _numbers(value: Any) -> bool:
    """Whether ``value`` is a number (a boolean included) or a nested list of them."""
    if isinstance(value, list):
        return all(_numbers(item) for item in value)
    return isinstance(value, int | float)


def _partition(read: Reader) -> PartitionSpec:
    return PartitionSpec(
        read.required_text("id"), read.required_text("target"), read.strings("nodes"),
        read.strings("inputs"), read.strings("outputs"), read.strings("after"),
    )  # fmt: skip


def _copy(read: Reader) -> CopySpec:
    return CopySpec(
        read.required_text("id"), read.required_text("value"), read.required_text("src"),
        read.required_text("dst"), read.required_count("nbytes"), read.strings("after"),
    )  # fmt: skip


def _storage(read: Reader) -> DeviceStorage:
    buffers = [
        BufferSpec(buffer.required_count("id"), buffer.required_count("nbytes"),
                   buffer.strings("values"))
        for buffer in read.objects("buffers", ("id", "nbytes", "values"))
    ]  # fmt: skip
    return DeviceStorage(
        read.required_count("weights_bytes"), read.required_count("activation_peak_bytes"), buffers
    )
