"""The ``onnxruntime`` codegen: a whole subgraph handed to one onnxruntime InferenceSession.

This is the bring-your-own-codegen pattern. ``supports`` is a capability predicate learnt
by probing: for every distinct node signature (domain, op, opset, input and output dtypes,
attributes) it builds a one-node model and asks onnxruntime's CPU provider to create a
session for it; the answer is memoised for the life of the process. ``compile`` exports the
chosen nodes as a standalone model whose inputs and outputs are exactly the boundary values
and creates a session that fuses inside the partition (optimisation level ENABLE_ALL).
On x86 that includes the NCHWc transformer, which converts activations into a blocked
layout where the partition starts and back where it ends; ``layout_samples`` times those
conversions with onnxruntime's own profiler, so that one-op timings can be cleared of them.

Units: on a unit, the session gets one intra-op thread per core of the unit. With one
thread onnxruntime computes on the calling thread, so :meth:`OnnxRuntimeSubgraph.run` pins
the calling thread to the unit's cores for the duration of the call and restores its
previous mask afterwards; with more cores the pool's worker threads are pinned by the
session itself (``session.intra_op_thread_affinities``).

onnxruntime is optional: importing this module never fails. Without it the codegen reports
itself unavailable, supports nothing, and ``compile`` raises a one-line
:class:`~autopart.errors.TargetError`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autopart.errors import ExecutionError, TargetError
from autopart.ir.graph import Graph, Node
from autopart.ir.weights import exported_bytes
from autopart.targets.boundary import exported_boundary
from autopart.targets.codegen import (
    HOST,
    CompiledSubgraph,
    Environment,
    Placement,
    ProbedCodegen,
    Role,
)
from autopart.targets.cpu_units import allowed_cores, pinned_to
from autopart.targets.onnxruntime import peer, qdq_peer
from autopart.targets.onnxruntime.layout import layout_seconds_per_run
from autopart.targets.onnxruntime.settings import ONNXRUNTIME
from autopart.targets.peer import Peer
from autopart.targets.probe_cache import ProbeCache
from autopart.targets.probe_model import node_signature, probe_model
from autopart.targets.shipped import shipped_bytes, shipped_whole
from autopart.targets.training import training_refusal

try:
    import onnxruntime as _ort
except ImportError:  # optional dependency: fail late and clearly, in ``compile``
    _ort = None

# Module-level flag read at call time (tests monkeypatch it to simulate a missing package).
HAVE_ONNXRUNTIME: bool = _ort is not None

MISSING_MESSAGE = "codegen onnxruntime needs the onnxruntime package: pip install onnxruntime"
PROVIDER = "CPUExecutionProvider"

# Probe results by node signature: (supported, reason when not). Lives as long as the process.
_PROBES = ProbeCache()


# -- capability probing -----------------------------------------------------------------------
def _unexchangeable(node: Node, graph: Graph) -> str | None:
    """Why onnxruntime's Python API cannot pass ``node``'s tensors to and fro, or None.

    It exchanges only numpy's own dtypes: ml_dtypes' (bfloat16, float8, int4, ...) are
    refused on input and come back as raw integers, so nodes using them are refused.
    """
    for name in [*node.present_inputs, *filter(None, node.outputs)]:
        dtype = graph.value(name).dtype
        if dtype is not None and np.dtype(dtype).num >= 256:  # a user-defined numpy dtype
            return f"{name!r} is {np.dtype(dtype).name}, which onnxruntime's numpy API cannot pass"
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _run_probe(node: Node, graph: Graph) -> tuple[bool, str]:
    """Ask onnxruntime to create a session for ``node`` alone; any failure means no."""
    assert _ort is not None
    options = _ort.SessionOptions()
    options.graph_optimization_level = _ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    try:
        model = probe_model(node, graph).SerializeToString()
        _ort.InferenceSession(model, options, providers=[PROVIDER])
    except Exception as error:  # onnxruntime raises several unrelated types; all mean "no"
        return False, _first_line(error)
    return True, ""


def probe(node: Node, graph: Graph) -> tuple[bool, str]:
    """Whether onnxruntime's CPU provider runs ``node``, and why not when it does not.

    Refuses without probing: training modes
    (:func:`~autopart.targets.training.training_refusal`), tensors of dtypes the numpy API
    cannot pass, inputs of unknown dtype, and everything when onnxruntime is missing. A
    node with subgraphs (If, Loop, Scan) is probed with them and the outer values they read
    (:func:`~autopart.targets.probe_model.probe_model`). Otherwise the answer for the
    node's :func:`~autopart.targets.probe_model.node_signature` is computed once (a session
    creation: median 0.2 ms, at most ~1.5 ms, plus ~10-60 ms for onnxruntime's own first-use
    set-up) and memoised in a module-level table; a cached answer costs a few microseconds.
    """
    if not HAVE_ONNXRUNTIME:
        return False, MISSING_MESSAGE
    refused = training_refusal(node, graph) or _unexchangeable(node, graph)
    if refused:
        return False, refused
    key = node_signature(node, graph)
    if key is None:
        return False, f"{node.op_type} has an input of unknown dtype"
    return _PROBES.get(key, lambda: _run_probe(node, graph))


def clear_probe_cache() -> None:
    """Forget every memoised probe (for tests and after swapping onnxruntime builds)."""
    _PROBES.clear()


# -- execution ------------------------------------------------------------------------------
class OnnxRuntimeSubgraph(CompiledSubgraph):
    """A compiled partition: one InferenceSession over the exported subgraph.

    ``feeds`` are the boundary inputs the session reads (constants are embedded as
    initializers, so they are not fed) and ``produced`` the outputs it computes. Requested
    outputs that no node produces are inputs (already in the environment) or constants
    (``passthrough``, written when absent). ``cores`` is the unit's core set the calling
    thread is pinned to during ``run`` (empty: no pinning). The session lives on the object,
    and ``source``, which makes the serialised model again when asked (:attr:`model_bytes`;
    held, the bytes would double the weights in memory); nothing is pickled or written.
    ``run`` may be called from several threads at once. ``fixed`` holds the values of the
    frozen inputs of a whole model as shipped, fed with every run. When every output is an
    input or a constant there is no session (``session`` is None) and ``run`` only passes them on.
    """

    def __init__(
        self,
        session: Any,
        source: Callable[[], bytes],
        inputs: Sequence[str],
        outputs: Sequence[str],
        feeds: Sequence[str],
        produced: Sequence[str],
        cores: Sequence[int],
        passthrough: dict[str, np.ndarray],
        on_unit: bool = False,
        label: str = "a subgraph",
        fixed: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self.session = session
        self.label = label
        self.on_unit = on_unit
        self._source = source
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.feeds = list(feeds)
        self.produced = list(produced)
        self.cores = tuple(cores)
        self._passthrough = passthrough
        self._fixed = dict(fixed or {})
        produced_set = set(self.produced)
        self._not_produced = [name for name in self.outputs if name not in produced_set]

    @property
    def model_bytes(self) -> bytes:
        """The serialised ONNX model of the session, made again from its source at each call."""
        return self._source()

    @property
    def intra_op_num_threads(self) -> int:
        """The thread count the session was created with (0 without a session)."""
        if self.session is None:
            return 0
        return int(self.session.get_session_options().intra_op_num_threads)

    def run(self, env: Environment) -> None:
        """Feed the boundary inputs from ``env``, run the session, store every output.

        The same as :meth:`run_timed` without the clock, and without entering the pinning
        when there are no cores to pin to: this is every run of a plan, where a
        microsecond is 1% of a small model.
        """
        if self.cores or not self.produced:
            self.run_timed(env)
            return
        self._store(env, self._session_run(self._feeds(env)))

    def whole_runner(self) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]] | None:
        """``session.run`` on the feeds by name, outputs zipped to their names.

        A whole model as shipped is fed its frozen inputs' values with every run, as
        :meth:`run` feeds them. None where a run needs more than the session: cores to pin
        to, outputs no node produces, or no session at all.
        """
        if self.cores or not self.produced or self._not_produced:
            return None
        session, produced = self.session, self.produced
        fixed = {n: np.asarray(v, order="C") for n, v in self._fixed.items() if n in self.feeds}
        feeds = tuple(n for n in self.feeds if n not in fixed)

        def run(values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
            try:
                results = session.run(produced, {**fixed, **{n: values[n] for n in feeds}})
            except Exception as error:  # onnxruntime's types are not importable stably
                raise ExecutionError(
                    f"onnxruntime failed running {self.label}: {_first_line(error)}"
                ) from None
            return dict(zip(produced, results, strict=True))

        return run

    def run_timed(self, env: Environment) -> float:
        """Like :meth:`run`; returns wall-clock seconds spent in ``session.run`` alone.

        onnxruntime offers no device clock, so this excludes only the feed assembly and the
        thread pinning around the call, not host-side dispatch inside onnxruntime. An error
        onnxruntime raises becomes a one-line :class:`ExecutionError` naming the nodes.
        """
        feeds = self._feeds(env)
        with pinned_to(self.cores):
            start = time.perf_counter()
            results = self._session_run(feeds) if self.produced else []
            elapsed = time.perf_counter() - start
        self._store(env, results)
        return elapsed

    def _feeds(self, env: Environment) -> dict[str, np.ndarray]:
        """Each feed from ``env``, else a frozen input's value (a whole model as shipped)."""
        return {
            n: np.asarray(env[n] if n in env else self._fixed[n], order="C") for n in self.feeds
        }

    def _session_run(self, feeds: dict[str, np.ndarray]) -> list[Any]:
        try:
            return self.session.run(self.produced, feeds)  # type: ignore[no-any-return]
        except Exception as error:  # onnxruntime's types are not importable stably
            raise ExecutionError(
                f"onnxruntime failed running {self.label}: {_first_line(error)}"
            ) from None

    def _store(self, env: Environment, results: Sequence[Any]) -> None:
        env.update(zip(self.produced, results, strict=True))
        for name in self._not_produced:
            if name not in env:
                env[name] = self._passthrough[name]

    def layout_samples(self, env: Environment, runs: int) -> list[tuple[float, float]]:
        """Per run, seconds in layout conversion kernels and in the other kernels.

        From onnxruntime's profiler: a second session over the same model, with the same
        threads and profiling on, runs ``runs`` times after one warm-up run; each run's
        ``ReorderInput``/``ReorderOutput`` kernel times are summed, and so are the rest.
        Outputs are not stored in ``env``.
        """
        if not self.produced:
            return [(0.0, 0.0)] * runs
        feeds = self._feeds(env)
        with tempfile.TemporaryDirectory(prefix="autopart-ort-") as folder:
            session = _create_session(
                self.model_bytes, self.on_unit, self.cores, str(Path(folder) / "profile")
            )
            with pinned_to(self.cores):
                for _ in range(runs + 1):
                    session.run(self.produced, feeds)
            events = json.loads(Path(session.end_profiling()).read_text())
        return layout_seconds_per_run(events, runs + 1)[-runs:]


class OnnxRuntimeCodegen(ProbedCodegen):
    """Whole subgraphs run by onnxruntime's CPU provider, optionally pinned to one CPU unit.

    Supports what a one-node probe session accepts (see :func:`probe`). Compiling needs the
    onnxruntime package; without it ``available()`` is false and ``compile`` raises
    :class:`TargetError`. It is ``--check``'s oracle (a whole model in one session) and the
    host provider of ONNX Runtime's provider-order baseline; its peer is onnxruntime alone.
    """

    name = "onnxruntime"
    device_kind = "cpu"
    uses_units = True
    fuses = True
    converts_layouts = True
    library = "onnxruntime"
    roles = frozenset({Role.ORACLE, Role.HOST_PROVIDER})
    probe = staticmethod(probe)
    runs_shipped = True

    @classmethod
    def available(cls) -> bool:
        """Whether the onnxruntime package could be imported."""
        return HAVE_ONNXRUNTIME

    @classmethod
    def settings(cls) -> Mapping[str, Any]:
        """``onnxruntime``: how long its pool threads spin after a run."""
        return {"onnxruntime": ONNXRUNTIME}

    @classmethod
    def peers(cls) -> tuple[Peer, ...]:
        """``onnxruntime alone`` (one session at its default options) and its int8 peer."""
        return (peer.ALONE, qdq_peer.QDQ_INT8)

    def alone_differs(self, placement: Placement) -> bool:
        """On a whole device a lone partition gets default session options: threads spin."""
        return placement.unit is None

    def compile(
        self,
        graph: Graph,
        nodes: Sequence[Node],
        inputs: Sequence[str],
        outputs: Sequence[str],
        placement: Placement = HOST,
    ) -> OnnxRuntimeSubgraph:
        """Export ``nodes`` as one model and create its session for ``placement``.

        A plan's only partition holding every node of a model imported from a file is
        that model as shipped, unchanged, with the frozen inputs fed their values
        (:mod:`autopart.targets.shipped`), unless onnxruntime rejects it; only otherwise
        must each node be one its probe takes (:class:`UnsupportedOpError`).

        Boundary ``inputs`` that are graph constants are embedded as initializers (so
        onnxruntime can fold and pre-pack them) and not fed at run time; other inputs the
        nodes do not read are ignored. Raises :class:`TargetError` when onnxruntime is
        missing, the placement is not a CPU device, a value the nodes read is neither an
        input nor a constant, or onnxruntime rejects the exported model.
        """
        if not self.available():
            raise TargetError(MISSING_MESSAGE)
        assert _ort is not None
        self.check_device(placement)
        unit = placement.device.unit(placement.unit)
        boundary = exported_boundary(graph, nodes, inputs, outputs)
        feeds, results = boundary.feeds, boundary.results
        cores = tuple(unit.cores) if unit is not None else ()
        alone = placement.alone and unit is None  # the session spins (see _create_session)
        source: Callable[[], bytes] = bytes  # every output folded to a constant: no session
        session = None
        shipped = shipped_whole(graph, nodes, placement, [None], weights_apart=True)
        fixed: dict[str, np.ndarray] = {}
        if shipped is not None:  # the whole model alone: as shipped (autopart.targets.shipped)
            with contextlib.suppress(TargetError):  # onnxruntime may need import's folding
                session = _create_session(shipped.model_bytes, unit is not None, cores, alone=alone)
                source = functools.partial(shipped_bytes, graph, nodes, placement, [None], True)
                feeds, results = shipped.feeds, shipped.produced
                fixed = dict(shipped.inputs.frozen)
        del shipped
        if session is None:  # its export: each node must be one onnxruntime takes
            self.check_supported(graph, nodes)
        if session is None and results:
            source = functools.partial(exported_bytes, graph, nodes, feeds, results)
            session = _create_session(source(), unit is not None, cores, alone=alone)
        compiled = OnnxRuntimeSubgraph(
            session, source, inputs, outputs, feeds, results, cores, boundary.passthrough,
            on_unit=unit is not None, label=_label(nodes), fixed=fixed,
        )  # fmt: skip
        compiled.linger_s = ONNXRUNTIME.spin_linger_s if alone and session is not None else 0.0
        return compiled


def _label(nodes: Sequence[Node]) -> str:
    """The nodes of a subgraph, for messages: ``node X`` or ``nodes X .. Y (n nodes)``."""
    if len(nodes) <= 1:
        return f"node {nodes[0].name}" if nodes else "an empty subgraph"
    return f"nodes {nodes[0].name} .. {nodes[-1].name} ({len(nodes)} nodes)"


def _create_session(
    model_bytes: bytes,
    on_unit: bool,
    cores: tuple[int, ...],
    profile_prefix: str | None = None,
    alone: bool = False,
) -> Any:
    """A CPU session: sequential, ENABLE_ALL, one thread per unit core (all cores off-unit).

    With ``profile_prefix`` onnxruntime's profiler records every run, to be written to a
    file under that prefix by ``end_profiling``. With ``alone`` (a plan's only partition,
    on the whole device) the session gets onnxruntime's default options, as a user running
    it alone has: no other lane runs, so the pool may spin between calls and choose its own
    thread count, and the plan is never slower than onnxruntime alone for want of
    settings. The spinning outlasts the call
    (:attr:`~autopart.targets.onnxruntime.settings.OnnxruntimeSettings.spin_linger_s`).
    Where this process may run on fewer cores than the machine has (a host of a
    ``local:N`` cluster, ``taskset``), the pool takes one thread per core it may use:
    onnxruntime's default counts the machine's cores, and its extra threads then share
    the process's cores (a one-core host ran squeezenet 3x slower).
    """
    assert _ort is not None
    if alone:
        allowed = len(allowed_cores())
        threads = allowed if 0 < allowed < (os.cpu_count() or allowed) else None
        return _session(model_bytes, None, threads)
    options = _ort.SessionOptions()
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    options.execution_mode = _ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = _ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # Spinning pool threads would keep cores busy after each call and slow whatever runs
    # next on another lane; partitions hand over to each other constantly.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if on_unit:
        threads = max(len(cores), 1)
        options.intra_op_num_threads = threads
        if threads > 1:
            # onnxruntime pins its threads-1 pool threads (1-based processor ids); the
            # calling thread is pinned by ``run``. Each pool thread may use any unit core.
            ids = ",".join(str(core + 1) for core in cores)
            options.add_session_config_entry(
                "session.intra_op_thread_affinities", ";".join([ids] * (threads - 1))
            )
    else:
        options.intra_op_num_threads = len(allowed_cores()) or os.cpu_count() or 1
    return _session(model_bytes, options)


def _session(model_bytes: bytes, options: Any, intra_threads: int | None = None) -> Any:
    """An InferenceSession on the CPU provider; a rejection is a one-line TargetError.

    :class:`~autopart.ir.weights.WeightsElsewhere` is read from its file, the weights
    mapped from theirs (:func:`~autopart.targets.onnxruntime.peer.cpu_session`). ``options``
    None: onnxruntime's defaults with ``intra_threads``, the session shared while held
    (:func:`~autopart.targets.onnxruntime.peer.default_session`).
    """
    assert _ort is not None
    try:
        if options is None:
            return peer.default_session(model_bytes, intra_threads)
        return peer.cpu_session(model_bytes, options)
    except Exception as error:  # onnxruntime's own exception types are not importable stably
        raise TargetError(f"onnxruntime rejected the subgraph: {_first_line(error)}") from None
