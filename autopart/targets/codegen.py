"""The codegen contract (bring-your-own-codegen); :mod:`autopart.targets.registry` finds them.

A codegen turns a set of IR nodes (not always connected) into something executable on one
kind of device. It states what it supports with :meth:`Codegen.supports`; nodes it does
not support fall back to an explicit fallback target chosen by the caller.

Every built-in codegen lives in a folder of its own under ``autopart/targets/``, whose
``codegen`` module defines it; the registry finds them there, and plugins by their entry
points. Beyond compiling, a codegen declares what the rest of autopart would otherwise
spell out by name: its library (:attr:`Codegen.library`, whose version a profile records),
the peers it offers (:meth:`Codegen.peers`), the precisions it computes in, the devices
it finds (:meth:`Codegen.discover_devices`) and the roles it plays (:class:`Role`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from autopart.errors import TargetError, UnsupportedOpError
from autopart.ir.graph import Graph, Node
from autopart.ir.target import REFERENCE_PRECISION
from autopart.targets.device_contract import Device
from autopart.targets.host import HostDevice
from autopart.targets.peer import Peer

# Value name -> tensor resident on the device of the subgraph that reads or writes it:
# numpy arrays on the host, the device's own tensor type elsewhere.
Environment = dict[str, Any]


@dataclass(frozen=True)
class Placement:
    """Where a compiled subgraph runs: a device, optionally one of its units, and company.

    ``alone`` says the subgraph is its plan's only partition: nothing else runs before,
    after or beside it, so a codegen may use its library's own defaults for a lone model
    (onnxruntime then lets its pool threads spin, which would slow a neighbour lane).
    ``precision`` is what the subgraph computes in: None for f32, else one of the
    codegen's :meth:`Codegen.precisions`.
    """

    device: Device
    unit: int | None = None
    alone: bool = False
    precision: str | None = None


HOST = Placement(HostDevice())


class Role(Enum):
    """A part some other code needs played by a codegen, asked of the registry, not by name.

    ``REFERENCE`` computes what ONNX specifies for every op autopart knows, on the host:
    the default fallback target, the executor's codegen and the last oracle of ``--check``.
    ``ORACLE`` runs a whole model alone, independently of autopart's plans: the first
    oracle of ``--check``. ``HOST_PROVIDER`` is the host's execution provider in ONNX
    Runtime's provider-order baseline, the last provider before the fallback.
    """

    REFERENCE = "reference"
    ORACLE = "oracle"
    HOST_PROVIDER = "host provider"


class CompiledSubgraph(ABC):
    """An executable subgraph: reads its inputs from an environment, writes its outputs.

    ``run`` must not keep references to the environment between calls, and must write every
    name in ``outputs``. On an asynchronous device it may return with work still queued:
    its outputs must then carry what completes them, so that ``device.to_host``, later
    subgraphs on other queues and ``device.synchronize(unit)`` wait for it. Tensors that
    leave a subgraph must not be recycled by it while a reader may still be queued. The
    executor never runs one compiled subgraph from two threads at once.
    """

    inputs: Sequence[str]
    outputs: Sequence[str]
    # Seconds this subgraph's library keeps cores busy after ``run`` returns (spinning
    # pool threads): whoever times something else next waits that long first.
    linger_s: float = 0.0

    @abstractmethod
    def run(self, env: Environment) -> None:
        """Compute ``outputs`` from ``inputs`` held in ``env`` and store them there."""

    def whole_runner(self) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]] | None:
        """A bare call for a plan whose only partition this is, or None (the default).

        The call takes C-contiguous arrays of the subgraph's boundary inputs by name and
        returns every one of its ``outputs`` by name, computed as :meth:`run` computes them,
        with no environment around it: what a library runs when it runs the whole model,
        so that a one-partition plan costs what the library alone costs. A codegen offers
        it only where its outputs are complete when the call returns (a host library).
        """
        return None

    def run_timed(self, env: Environment) -> float:
        """Like :meth:`run`, returning the seconds it took (devices with events override)."""
        start = time.perf_counter()
        self.run(env)
        return time.perf_counter() - start

    def layout_samples(self, env: Environment, runs: int) -> list[tuple[float, float]]:
        """Per run of ``runs``: seconds converting layouts at this boundary, and in kernels.

        The second figure is the subgraph's own kernels' time in the same run. A codegen
        that converts tensors into a blocked layout where a subgraph starts and back where
        it ends pays that at partition edges only, not per op; one-op timings include it,
        and the profiler takes it off them, never below the kernels' own time. Codegens
        that do no such thing (``converts_layouts`` false) keep this default: zeros.
        """
        return [(0.0, 0.0)] * runs


@runtime_checkable
class Reduction(Protocol):
    """How a node emulates a reduced precision: what it computes on and what it gives.

    ``inputs`` maps a node's arguments (weights included) to those its reduced kernel
    computes on, ``outputs`` its exact results to what it stores: bf16 rounds both
    (:class:`Rounding`), int8 its activation and weight (:mod:`autopart.targets.qdq`).
    """

    def inputs(self, node: str, args: Sequence[Any]) -> list[Any]:
        """The arguments node ``node`` computes on."""

    def outputs(self, node: str, values: Sequence[Any]) -> list[Any]:
        """The values node ``node`` stores, from the ones it computed."""


class Rounding:
    """The :class:`Reduction` that passes every input and output through ``rounding``."""

    def __init__(self, rounding: Callable[[Any], Any]) -> None:
        self.rounding = rounding

    def inputs(self, node: str, args: Sequence[Any]) -> list[Any]:
        """Every argument rounded."""
        return [self.rounding(arg) for arg in args]

    def outputs(self, node: str, values: Sequence[Any]) -> list[Any]:
        """Every value rounded."""
        return [self.rounding(value) for value in values]


EXACT = Rounding(lambda value: value)  # no node reduced


@runtime_checkable
class Emulating(Protocol):
    """A compiled subgraph that can emulate reduced precision node by node (the reference).

    ``node_names`` are its nodes in the order they run; ``run_rounded`` runs a range of its
    steps with chosen nodes computing as ``reduction`` says (see
    :mod:`autopart.profile.sensitivity`); ``rounded_outputs`` yields, in one run, each
    chosen node's exact outputs and those it computes reduced on its exact inputs.
    """

    node_names: list[str]

    def run_rounded(
        self,
        env: Environment,
        rounded: Collection[str],
        reduction: Reduction,
        start: int = 0,
        stop: int | None = None,
    ) -> None:
        """Run steps ``start`` to ``stop`` with the nodes in ``rounded`` emulating a precision."""

    def rounded_outputs(
        self, env: Environment, chosen: Collection[str], reduction: Reduction
    ) -> Iterator[tuple[str, Sequence[Any], Sequence[Any]]]:
        """Each chosen node's exact and reduced outputs, from one run."""


class Codegen(ABC):
    """What every codegen provides: a name, its device kind, support predicates, a compiler.

    ``supports`` must be cheap and side-effect free: it is asked about every node of a
    graph while planning. ``compile`` receives nodes in topological order, all of which
    ``supports`` accepted, the boundary values they read and must produce, and the
    placement to run on; the compiled subgraph reads and writes tensors native to that
    placement's device. ``uses_units`` says whether the codegen can be pinned to one unit;
    ``clock`` whether ``run_timed`` reports wall time or device time from events;
    ``fuses`` whether it fuses ops inside a subgraph (the profiler then also times pairs of
    ops together); ``converts_layouts`` whether its compiled subgraphs convert data layouts
    at their edges (the profiler then measures that with ``layout_samples``);
    ``mixes_precisions`` whether one subgraph may hold nodes of different precisions, each
    computing in its own virtual device's precision (a plan's partitions then group nodes
    by target regardless of precision, see :func:`autopart.targets.resolve.compile_target`).

    ``library`` is the distribution whose version identifies its results (None: none
    beyond autopart), ``roles`` the parts it plays (:class:`Role`). ``runs_shipped`` says
    that it compiles a plan's only partition holding a whole model from the model as
    shipped (:mod:`autopart.targets.shipped`): such a partition runs whatever the library
    runs as a model, nodes its one-node probe refuses included (:meth:`compile` checks
    support only when it cannot take that path).
    """

    name: ClassVar[str]
    device_kind: ClassVar[str]
    uses_units: ClassVar[bool] = False
    clock: ClassVar[str] = "wall"  # what run_timed measures: "wall" or device "event" time
    fuses: ClassVar[bool] = False
    converts_layouts: ClassVar[bool] = False
    mixes_precisions: ClassVar[bool] = False
    library: ClassVar[str | None] = None
    roles: ClassVar[frozenset[Role]] = frozenset()
    runs_shipped: ClassVar[bool] = False

    @classmethod
    def available(cls) -> bool:
        """Whether this codegen's dependencies are installed (optional ones fail late)."""
        return True

    @classmethod
    def library_version(cls) -> str | None:
        """The installed version of :attr:`library` (None without one, or when absent)."""
        if cls.library is None:
            return None
        try:
            return importlib.metadata.version(cls.library)
        except importlib.metadata.PackageNotFoundError:
            return None

    @classmethod
    def settings(cls) -> Mapping[str, Any]:
        """The groups of tuned values this codegen reads, by the name a report records.

        Each is a frozen dataclass whose fields carry their provenance
        (:func:`autopart.settings.tuned`); the default reads none.
        """
        return {}

    @classmethod
    def peers(cls) -> tuple[Peer, ...]:
        """The configurations of its library a user would run instead of autopart.

        Each :class:`~autopart.targets.peer.Peer` stands for this codegen's whole-host
        single-target plan at the peer's precision; ``bench`` and ``tune`` time them beside
        autopart's plans. The default offers none.
        """
        return ()

    @classmethod
    def forget_compiled(cls) -> None:
        """Drop what this codegen keeps compiled between compiles (a cache), if anything.

        Called once a stage whose compiles nothing after it reuses is done (a profile's
        per-op models), so that they do not stay resident through the race. Compiled
        objects still in use stay valid. The default keeps nothing, so drops nothing.
        """
        return None

    @classmethod
    def discover_devices(cls) -> Sequence[Device]:
        """The devices of ``device_kind`` this codegen finds here, besides the host.

        :func:`~autopart.targets.devices.discover` asks every registered codegen; it must
        never raise for lack of hardware or drivers (then: none). The default finds none.
        """
        return ()

    @classmethod
    def left_out_devices(cls) -> Sequence[tuple[str, str]]:
        """Devices of ``device_kind`` found here but left out, as (name, why) (default: none).

        ``autopart devices`` shows them, so a user learns why a device they have is absent.
        """
        return ()

    @classmethod
    def precisions(cls) -> tuple[str, ...]:
        """The precisions this codegen computes in on this machine, f32 first.

        Probed from the hardware and the library, never assumed: a codegen offers bf16 only
        where the CPU has bf16 units and its library uses them. The default is f32 alone;
        a codegen offering more must compile a :class:`Placement`'s ``precision``.
        """
        return (REFERENCE_PRECISION,)

    @abstractmethod
    def supports(self, node: Node, graph: Graph) -> bool:
        """Whether this codegen can run ``node`` with its attributes, shapes and dtypes."""

    def supports_at(self, node: Node, graph: Graph, precision: str | None) -> bool:
        """Whether this codegen runs ``node`` computing in ``precision`` (None: f32).

        A reduced precision may cover fewer ops than the codegen supports (int8: only the
        weighted ops it quantises); a node it does not cover must not be offered at that
        precision, rather than silently run at another. The default: :meth:`supports`.
        """
        return self.supports(node, graph)

    @classmethod
    def support_probes(cls, precision: str | None) -> bool:
        """Whether :meth:`supports_at` at ``precision`` runs probe models to answer.

        Such an answer costs seconds per graph the first time (OpenVINO's int8: 36 s for a
        12,400-node stack), so a tune's screen asks it only once such a target is due. The
        default: False, :meth:`supports_at` is cheap.
        """
        return False

    @abstractmethod
    def compile(
        self,
        graph: Graph,
        nodes: Sequence[Node],
        inputs: Sequence[str],
        outputs: Sequence[str],
        placement: Placement = HOST,
    ) -> CompiledSubgraph:
        """Compile ``nodes`` of ``graph`` into one subgraph that runs at ``placement``."""

    def check_device(self, placement: Placement) -> None:
        """Raise :class:`TargetError` unless ``placement`` is a device of ``device_kind``."""
        if placement.device.kind != self.device_kind:
            raise TargetError(
                f"codegen {self.name} runs on {self.device_kind} devices, "
                f"not {placement.device.name!r}"
            )

    def alone_differs(self, placement: Placement) -> bool:
        """Whether a plan's only partition at ``placement`` gets other library settings.

        Where it does (onnxruntime on a whole device lets its pool threads spin), the
        profiler also times its calibration windows compiled both ways (``alone`` rows),
        and the cost model scales a lone partition by what that changed.
        """
        return False

    def reason(self, node: Node, graph: Graph) -> str | None:
        """Why this codegen cannot run ``node`` (one line, "" when it cannot say), or None.

        Codegens that know why (an attribute value, a probe's error) override it; the
        default only asks :meth:`supports`. It must be None exactly when ``supports`` is true.
        """
        return None if self.supports(node, graph) else ""

    def check_supported(self, graph: Graph, nodes: Sequence[Node] | None = None) -> None:
        """Raise :class:`UnsupportedOpError` naming every unsupported op, its nodes and why."""
        rejected: dict[tuple[str, str], list[str]] = {}
        for node in graph.nodes if nodes is None else nodes:
            why = self.reason(node, graph)
            if why is not None:
                rejected.setdefault((node.op_type, why), []).append(node.name)
        if rejected:
            parts = [
                f"{op} (node{'s' if len(names) > 1 else ''} {', '.join(names[:4])}"
                f"{f' and {len(names) - 4} more' if len(names) > 4 else ''})"
                f"{f': {why}' if why else ''}"
                for (op, why), names in sorted(rejected.items())
            ]
            raise UnsupportedOpError(f"codegen {self.name} does not support: {'; '.join(parts)}")


class ProbedCodegen(Codegen):
    """A codegen that learns what it supports by probing its library, one node at a time.

    ``probe`` answers, for a node, whether the library takes it and, if not, the library's
    one-line reason; it is memoised per node signature by the codegen's module
    (bring-your-own-codegen: onnxruntime, OpenVINO).
    """

    probe: ClassVar[Callable[[Node, Graph], tuple[bool, str]]]

    def supports(self, node: Node, graph: Graph) -> bool:
        """Whether the library takes ``node`` (memoised probe)."""
        return type(self).probe(node, graph)[0]

    def reason(self, node: Node, graph: Graph) -> str | None:
        """Why ``node`` is not supported (the library's first error line), else ``None``."""
        supported, why = type(self).probe(node, graph)
        return None if supported else why
