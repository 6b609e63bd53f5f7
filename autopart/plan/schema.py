"""The plan document: a versioned, human-readable JSON record of where everything runs.

A plan is data only. Loading checks the schema, the JSON shape and internal consistency;
:func:`autopart.plan.validate.validate_plan` checks it against a graph and a machine.
Plans are never pickled.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autopart.errors import AutopartError
from autopart.io import atomic_write_bytes

SCHEMA = "autopart.plan"
SCHEMA_VERSION = 1


class PlanError(AutopartError):
    """A plan file is corrupt, of another schema, or does not fit the model or machine."""


@dataclass
class ModelRef:
    """Which model a plan is for: how to load it, and the hash of its imported graph."""

    name: str
    source: str
    hash: str
    input_shapes: dict[str, list[int]] = field(default_factory=dict)


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


@dataclass
class Plan:
    """Every node's target, the partitions, the copy nodes, the storage and the predicted cost.

    ``order`` is one valid sequential schedule of the step ids (partitions ``p*`` and
    copies ``c*``); ``after`` lists on each step give the dependencies that a concurrent
    executor honours.
    """

    model: ModelRef
    fallback: str
    assignment: dict[str, str]
    partitions: list[PartitionSpec]
    copies: list[CopySpec]
    order: list[str]
    storage: dict[str, DeviceStorage]
    predicted: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    measured: dict[str, Any] | None = None  # a measured run's timings, see autopart.report

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
        """Write the plan as indented JSON, atomically."""
        text = json.dumps(self.to_dict(), indent=1) + "\n"
        atomic_write_bytes(path, text.encode())

    @classmethod
    def from_dict(cls, document: Any) -> Plan:
        """Rebuild a plan from its JSON document; raise :class:`PlanError` when malformed."""
        if not isinstance(document, dict) or document.get("schema") != SCHEMA:
            raise PlanError("not an autopart plan (missing schema 'autopart.plan')")
        version = document.get("version")
        if version != SCHEMA_VERSION:
            raise PlanError(
                f"plan schema version {version!r} is not supported (expected {SCHEMA_VERSION})"
            )
        try:
            storage = {
                device: DeviceStorage(
                    entry["weights_bytes"],
                    entry["activation_peak_bytes"],
                    [BufferSpec(**buffer) for buffer in entry["buffers"]],
                )
                for device, entry in document["storage"].items()
            }
            plan = cls(
                model=ModelRef(**document["model"]),
                fallback=str(document["fallback"]),
                assignment={str(k): str(v) for k, v in document["assignment"].items()},
                partitions=[PartitionSpec(**p) for p in document["partitions"]],
                copies=[CopySpec(**c) for c in document["copies"]],
                order=[str(s) for s in document["order"]],
                storage=storage,
                predicted=document.get("predicted"),
                notes=list(document.get("notes", [])),
                measured=document.get("measured"),
            )
        except (KeyError, TypeError, AttributeError) as error:
            raise PlanError(f"plan document is malformed: {type(error).__name__} {error}") from None
        if document.get("tree") is not None and document["tree"] != plan.tree():
            raise PlanError("plan's partition tree disagrees with its partitions (edited by hand?)")
        return plan

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """Read a plan file; corrupt or foreign files raise :class:`PlanError`."""
        try:
            document = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PlanError(f"plan file not found: {path}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise PlanError(f"{path} is not a readable plan: {error}") from None
        return cls.from_dict(document)
