"""The ``openvino`` codegen: a whole subgraph compiled by OpenVINO's CPU plugin.

Like the onnxruntime codegen, this is the bring-your-own-codegen pattern. ``supports`` is
learnt by probing (:mod:`autopart.targets.openvino.probe`). ``compile`` exports the chosen
nodes as a standalone model whose inputs and outputs are the boundary values and compiles
it from memory (``Core.read_model(bytes, empty weights tensor)``): no file is written,
but for a large model, whose weights are files it maps (:mod:`autopart.ir.weights`).
Compiled models are cached per process by the model's hash and the target's settings.

Precision: every model is compiled with the target's precision as
``INFERENCE_PRECISION_HINT``: f32 for a target that names none (``cpu@openvino``), so
outputs match the numpy reference within the project's tolerance, and bf16 for
``cpu@openvino:bf16``, offered where OpenVINO lists BF16 among the CPU's optimisation
capabilities and the CPU flags show avx512_bf16 or AMX
(:func:`~autopart.targets.openvino.library.offered_precisions`).

Layouts: the CPU plugin runs convolutions and pooling in blocked or channels-last layouts
and inserts ``Reorder`` nodes where the plain layout at a subgraph's edges meets them;
``layout_samples`` times those with OpenVINO's per-node counters (``PERF_COUNT``).

Units: the whole device (``cpu@openvino``) gets only the LATENCY hint and its precision,
so OpenVINO uses every core this process may run on, exactly as OpenVINO alone would (at
its default precision, bf16 on such CPUs, ``cpu@openvino:bf16`` is OpenVINO as installed). A
unit (``cpu/N@openvino``) gets one stream of one inference thread per core of the unit,
OpenVINO's own pinning off, and the calling thread pinned to the unit's cores for the call
(with one thread OpenVINO computes on the calling thread).

Long chains: OpenVINO's snippets (its own fusing of elementwise ops into generated kernels)
take time growing faster than the square of a chain's length to compile: 2.3 s for a chain
of 500 small ops, 11 s for 1,000, 67 s for 2,000, against 0.3, 0.5 and 1.2 s without them,
and those chains ran 25-30% quicker without them too. A transformer's 4,991 nodes, whose
chains are short, compile in 11 s either way, and its attention runs 3.6x quicker with them.
So a subgraph holding a chain of more than :data:`LONG_CHAIN` nodes, each its
predecessor's only reader, is compiled with snippets off.

openvino is optional: without it the codegen reports itself unavailable, supports nothing,
and ``compile`` raises a one-line :class:`~autopart.errors.TargetError`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from autopart.errors import ExecutionError, TargetError
from autopart.ir import weights
from autopart.ir.graph import Graph, Node
from autopart.targets import qdq
from autopart.targets.boundary import exported_boundary
from autopart.targets.codegen import HOST, CompiledSubgraph, Environment, Placement, ProbedCodegen
from autopart.targets.cpu_units import cpu_flags, pinned_to
from autopart.targets.deadline import CompileTimeoutError
from autopart.targets.openvino import library, nncf_peer, peer, quantize
from autopart.targets.openvino.agreement import agrees_in_float
from autopart.targets.openvino.pieces import PIECE_NODES, PiecewiseSubgraph, compile_in_pieces
from autopart.targets.openvino.probe import probe
from autopart.targets.peer import Peer
from autopart.targets.shipped import ShippedModel, shipped_bytes, shipped_whole

# Node types of OpenVINO's layout conversions in its per-node performance counters.
LAYOUT_NODE_TYPES = frozenset({"Reorder"})


# -- execution ------------------------------------------------------------------------------

LONG_CHAIN = 256  # a longer chain of sole readers compiles with snippets off (module doc)


def longest_chain(graph: Graph, nodes: Sequence[Node]) -> int:
    """The most ``nodes`` in a row, each reading the one before as that value's only reader."""
    inside = {id(node) for node in nodes}
    length: dict[int, int] = {}
    for node in nodes:  # in topological order
        best = 0
        for name in node.present_inputs:
            value = graph.value(name)
            producer = value.producer
            if producer is not None and id(producer) in inside and len(value.consumers) == 1:
                best = max(best, length.get(id(producer), 0))
        length[id(node)] = best + 1
    return max(length.values(), default=0)


class OpenVinoSubgraph(CompiledSubgraph):
    """A compiled partition: one OpenVINO CompiledModel and this subgraph's infer request.

    ``feeds`` are the boundary inputs the model reads (constants are embedded), in the
    model's input order, and ``produced`` the outputs it computes, in its output order.
    Requested outputs that no node produces are inputs or constants (``passthrough``);
    feeds absent from the environment are frozen inputs, fed their values (``fixed``).
    ``aliases`` names the other outputs that are the same tensor as a produced one.
    ``cores`` is the unit's core set the calling thread is pinned to during ``run``
    (empty: the whole device, no pinning). Outputs are fresh arrays, never recycled.
    ``source`` makes the serialised model again when asked (:attr:`model_bytes`): held
    while the subgraph lives, the bytes would double the weights it keeps in memory.
    """

    def __init__(
        self,
        model: Any,
        source: Callable[[], bytes],
        config: dict[str, str],
        inputs: Sequence[str],
        outputs: Sequence[str],
        feeds: Sequence[str],
        produced: Sequence[str],
        cores: Sequence[int],
        passthrough: dict[str, np.ndarray],
        fixed: Mapping[str, np.ndarray] | None = None,
        aliases: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.model = model
        self._source = source
        self.config = dict(config)
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.feeds = list(feeds)
        self.produced = list(produced)
        self.cores = tuple(cores)
        self._passthrough = passthrough
        self._fixed = dict(fixed or {})
        self._aliases = {name: list(others) for name, others in (aliases or {}).items()}
        self._request = model.create_infer_request()

    @property
    def model_bytes(self) -> bytes:
        """The serialised ONNX model compiled, made again from its source at each call."""
        return self._source()

    def run(self, env: Environment) -> None:
        """Feed the boundary inputs from ``env``, infer, store every output."""
        self.run_timed(env)

    def _value(self, env: Environment, name: str) -> Any:
        """A feed: from ``env``, else a frozen input's value (a whole model as shipped)."""
        return env[name] if name in env else self._fixed[name]

    def run_timed(self, env: Environment) -> float:
        """Like :meth:`run`; returns wall-clock seconds spent in ``infer`` alone.

        An error OpenVINO raises becomes a one-line :class:`ExecutionError`.
        """
        feeds = {i: library.feed(self._value(env, name)) for i, name in enumerate(self.feeds)}
        with pinned_to(self.cores):
            start = time.perf_counter()
            try:
                results = self._request.infer(feeds, share_inputs=True, share_outputs=False)
            except Exception as error:  # OpenVINO's exception types are not specific
                shown = ", ".join(self.produced[:3]) + (" ..." if len(self.produced) > 3 else "")
                raise ExecutionError(
                    f"openvino failed computing {shown}: {library.first_line(error)}"
                ) from None
            elapsed = time.perf_counter() - start
        for index, name in enumerate(self.produced):
            env[name] = results[index]
            for other in self._aliases.get(name, ()):
                env[other] = results[index]
        for name in self.outputs:
            if name not in env:
                env[name] = self._passthrough[name]
        return elapsed

    def layout_samples(self, env: Environment, runs: int) -> list[tuple[float, float]]:
        """Per run, seconds in OpenVINO's ``Reorder`` nodes and in its other nodes.

        A second compiled model with the same settings and ``PERF_COUNT`` on runs
        ``runs`` times after one warm-up run; each run's per-node real times are summed.
        Outputs are not stored in ``env``.
        """
        model = library.core().compile_model(
            library.read_onnx(self.model_bytes),
            library.DEVICE,
            {**self.config, "PERF_COUNT": "YES"},
        )
        request = model.create_infer_request()
        feeds = {i: library.feed(self._value(env, name)) for i, name in enumerate(self.feeds)}
        samples = []
        with pinned_to(self.cores):
            for _ in range(runs + 1):
                request.infer(feeds, share_inputs=True)
                samples.append(layout_seconds(request.get_profiling_info()))
        return samples[-runs:]


def layout_seconds(counters: Sequence[Any]) -> tuple[float, float]:
    """Seconds in layout conversion nodes and in the other nodes, from one run's counters."""
    layout = sum(c.real_time.total_seconds() for c in counters if c.node_type in LAYOUT_NODE_TYPES)
    other = sum(
        c.real_time.total_seconds() for c in counters if c.node_type not in LAYOUT_NODE_TYPES
    )
    return layout, other


class OpenVinoCodegen(ProbedCodegen):
    """Whole subgraphs compiled by OpenVINO for the CPU, optionally on one CPU unit.

    Supports what a one-node probe compiles (see :func:`probe`). Computes in f32, or in
    bf16 or int8 where the CPU has them (:meth:`precisions`); int8 nodes are quantised to
    QDQ with the model's calibration (:mod:`autopart.targets.openvino.quantize`).
    Compiling needs the openvino package; without it ``available()`` is false and
    ``compile`` raises :class:`TargetError`.
    """

    name = "openvino"
    device_kind = "cpu"
    uses_units = True
    fuses = True
    converts_layouts = True
    library = "openvino"
    probe = staticmethod(probe)
    runs_shipped = True
    mixes_precisions = True

    @classmethod
    def available(cls) -> bool:
        """Whether the openvino package could be imported."""
        return library.HAVE_OPENVINO

    @classmethod
    def forget_compiled(cls) -> None:
        """Empty the library's cache of compiled models (:func:`library.forget_compiled`)."""
        library.forget_compiled()

    @classmethod
    def peers(cls) -> tuple[Peer, ...]:
        """``openvino alone`` (as installed, no properties), in f32, and ``+ nncf int8``."""
        return (peer.AS_INSTALLED, peer.F32, nncf_peer.NNCF_INT8)

    @classmethod
    def precisions(cls) -> tuple[str, ...]:
        """f32, and bf16 or int8 where OpenVINO and the CPU flags both show their units."""
        return library.offered_precisions(cpu_flags()) if cls.available() else ("f32",)

    @classmethod
    def support_probes(cls, precision: str | None) -> bool:
        """At int8: each configuration's kernel is probed against f32 (:mod:`.agreement`)."""
        return precision == qdq.PRECISION

    def supports_at(self, node: Node, graph: Graph, precision: str | None) -> bool:
        """As :meth:`supports`, for a configuration OpenVINO's kernel computes right.

        At int8, only quantisable ops OpenVINO runs in int8 here: the weighted ops
        :func:`~autopart.targets.qdq.quantisable` accepts whose op type a probe compiled to
        u8/i8 (:func:`~.quantize.int8_op_types`); any other op at int8 would compute in
        float while its target says int8, so it is not offered. In float, a convolution
        whose configuration the probe finds wrong is not offered
        (:func:`~.agreement.agrees_in_float`), nor one with an output row or column that
        reads nothing but padding (:func:`~.quantize.reads_only_padding`): OpenVINO's f32
        kernel wrote values there, and once left memory it never set (1e28 and more).
        """
        if not self.supports(node, graph):
            return False
        if precision == qdq.PRECISION:
            return quantize.runs_in_int8(node, graph)
        if quantize.reads_only_padding(node, graph):
            return False
        return agrees_in_float(node, graph, precision)

    def compile(
        self,
        graph: Graph,
        nodes: Sequence[Node],
        inputs: Sequence[str],
        outputs: Sequence[str],
        placement: Placement = HOST,
    ) -> OpenVinoSubgraph | PiecewiseSubgraph:
        """Export ``nodes`` as one model and compile it (cached) for ``placement``.

        A plan's only partition holding every node of a model imported from a file, at one
        precision, is that model as shipped, reshaped to the static input shapes and fed
        the frozen values (:mod:`autopart.targets.shipped`), unless OpenVINO rejects it;
        only otherwise must each node be one its probe takes (:class:`UnsupportedOpError`).

        More than :data:`~autopart.targets.openvino.pieces.PIECE_NODES` nodes are compiled
        in pieces (:mod:`autopart.targets.openvino.pieces`).
        Boundary ``inputs`` that are graph constants are embedded and not fed at run time.
        Raises :class:`TargetError` when openvino is missing, the placement is not a CPU
        device, a value the nodes read is neither an input nor a constant, or OpenVINO
        rejects the exported model.
        """
        if not self.available():
            raise TargetError(library.MISSING_MESSAGE)
        self.check_device(placement)
        own = [placement.precision or n.virtual_device.precision for n in nodes]
        shipped = shipped_whole(graph, nodes, placement, own, weights_apart=True)
        if shipped is not None and own[0] != qdq.PRECISION:
            source = functools.partial(shipped_bytes, graph, nodes, placement, own, True)
            try:
                return self._compile_shipped(
                    shipped, source, graph, nodes, inputs, outputs, placement
                )
            except CompileTimeoutError:
                raise  # the deadline is spent: compiling the export instead cannot finish
            except TargetError:
                pass  # OpenVINO may need import's folding
        del shipped
        self.check_supported(graph, nodes)  # its export: each node must be one OpenVINO takes
        if len(nodes) > PIECE_NODES:
            return compile_in_pieces(
                graph,
                nodes,
                inputs,
                outputs,
                lambda part, feeds, made: self.compile(graph, part, feeds, made, placement),
            )
        boundary = exported_boundary(graph, nodes, inputs, outputs)
        feeds, results = boundary.feeds, boundary.results
        if not results:
            raise TargetError("subgraph computes none of its outputs; nothing to compile")
        uniform = hinted_precision(own)
        cores, config = _placement_config(graph, nodes, placement, uniform)
        paired = list(zip(nodes, own, strict=True))
        islands = [] if uniform is not None else [n for n, p in paired if p == "bf16"]
        int8 = [n.name for n, p in paired if p == qdq.PRECISION]
        source = functools.partial(exported_bytes, graph, nodes, feeds, results, int8)
        model = library.compiled_model(
            source(),
            config,
            [n.name for n in islands],
            [name for n in islands for name in n.outputs if name],
        )
        return OpenVinoSubgraph(
            model, source, config, inputs, outputs, feeds, results, cores, boundary.passthrough
        )

    def _compile_shipped(
        self,
        shipped: ShippedModel,
        source: Callable[[], bytes],
        graph: Graph,
        nodes: Sequence[Node],
        inputs: Sequence[str],
        outputs: Sequence[str],
        placement: Placement,
    ) -> OpenVinoSubgraph:
        """The whole model as shipped (:mod:`autopart.targets.shipped`), for ``placement``.

        Reshaped to the static input shapes and fed the frozen values, as OpenVINO alone is.
        """
        precision = placement.precision or nodes[0].virtual_device.precision
        cores, config = _placement_config(graph, nodes, placement, precision)
        fixed = shipped.inputs
        model = library.compiled_model(shipped.model_bytes, config, shapes=fixed.static_shapes())
        declared = [*inputs, *fixed.frozen]
        feeds = [names[0] for names in library.port_names(model.inputs, declared)]
        named = library.port_names(model.outputs, outputs)
        produced = [names[0] for names in named]
        return OpenVinoSubgraph(
            model, source, config, inputs, outputs, feeds, produced, cores, {},
            fixed=fixed.frozen, aliases={names[0]: names[1:] for names in named},
        )  # fmt: skip


def exported_bytes(
    graph: Graph,
    nodes: Sequence[Node],
    feeds: Sequence[str],
    results: Sequence[str],
    int8: Sequence[str],
) -> bytes:
    """``nodes`` exported as a model of ``feeds`` to ``results``, ``int8`` ones in QDQ int8.

    In float, a large model's weights are files beside it
    (:func:`autopart.ir.weights.exported_bytes`).
    """
    if int8:
        return quantize.quantised_bytes(graph, nodes, feeds, results, int8)
    return weights.exported_bytes(graph, nodes, feeds, results)


def hinted_precision(own: Sequence[str | None]) -> str | None:
    """The precision a partition of nodes at ``own`` precisions compiles with as its hint.

    One precision: that one. int8 beside one float precision: the float one, for int8
    nodes are quantised in the model (QDQ) whatever the hint, and the rest then compute in
    the library's own bf16 (or f32), its int8 kernels fused with their activations as
    NNCF's int8 models are (a VGG16 classifier's int8 plan with bf16 around it: 10.4 ms
    in Convert islands, where each Relu ran apart from its u8 Conv, 7.4 ms so). None: f32
    and bf16 nodes both, so bf16 goes in Convert islands (:func:`library.add_islands`).
    """
    if len(set(own)) == 1:
        return own[0]
    floats = {precision or library.PRECISION for precision in own if precision != qdq.PRECISION}
    return next(iter(floats)) if len(floats) == 1 else None


def _placement_config(
    graph: Graph, nodes: Sequence[Node], placement: Placement, precision: str | None
) -> tuple[tuple[int, ...], dict[str, str]]:
    """The unit's cores (none: the whole device) and the properties ``nodes`` compile with.

    The unit's or the LATENCY hint, ``precision``'s hint (None: f32 and bf16 nodes mixed),
    and snippets off for a chain longer than :data:`LONG_CHAIN`.
    """
    unit = placement.device.unit(placement.unit)
    cores = tuple(unit.cores) if unit is not None else ()
    config = library.target_config(cores if unit is not None else None, precision)
    if longest_chain(graph, nodes) > LONG_CHAIN:
        config["SNIPPETS_MODE"] = "DISABLE"
    return cores, config
