"""Whether the host's cores compute side by side right now, or share one core's speed.

On the shared 2-core VMs this project runs on, spells of seconds to minutes come in which
work split over both cores runs about twice as slowly while work on one core does not, as
if the hypervisor had placed both virtual cores on one physical core: a race of shufflenet
timed onnxruntime alone at 5.63 ms and, minutes later in the same process, 2.65 ms, while
the runners pinned to one core agreed within 5-9%. Interleaved rounds cancel drift common
to every runner, not one that slows only those on both cores; a race taken in such a spell
keeps a one-core plan that is 1.5x slower once the spell ends.

:class:`CoreSharing` detects it directly: it times a small compute-bound model (a chain of
cache-resident matrix products) on one core alone, then on every core at once, one copy
per core, each pinned to its core. Cores of their own take about as long together as one
alone (1,795 of 2,062 probes read under 1.2); cores that share one take about twice as
long (181 read 1.8-2.2). The ratio is :meth:`CoreSharing.ratio`.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from autopart.errors import AutopartError
from autopart.ir.onnx_import import load_graph
from autopart.settings import tuned
from autopart.targets.codegen import CompiledSubgraph, Placement, Role
from autopart.targets.host import HostDevice
from autopart.targets.registry import codegen_for


@dataclass(frozen=True)
class CoreSharingSettings:
    """When the cores count as sharing one core's speed (profile.core_sharing)."""

    core_sharing_limit: float = tuned(
        1.4,
        "a timed round is run again when, right after it, a probe on every core at once took "
        "over this many times its time on one core alone: of 2,062 probes on the 2-core VM, "
        "1,795 read under 1.2 and 181 1.8-2.2 (spells), 23 fell between 1.3 and 1.6; blocks "
        "beside a probe over 1.4 timed onnxruntime on both cores 1.39x slower, on one core "
        "1.14x (experiments/exp_core_sharing.py)",
    )


CORE_SHARING = CoreSharingSettings()
PROBE_RUNS = 8  # runs of the probe model per timing: about 5 ms on one Zen 4 core
_WIDTH, _ROWS, _DEPTH = 256, 64, 8  # a 256 KiB weight read 8 times: it stays in L2


def _matmul_chain() -> onnx.ModelProto:
    """The probe: ``_DEPTH`` products of a ``[_ROWS, _WIDTH]`` input by one square weight."""
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((_WIDTH, _WIDTH)) / np.sqrt(_WIDTH)).astype(np.float32)
    nodes, previous = [], "x"
    for index in range(_DEPTH):
        nodes.append(helper.make_node("MatMul", [previous, "w"], [f"h{index}"]))
        previous = f"h{index}"
    graph = helper.make_graph(
        nodes,
        "core_sharing_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [_ROWS, _WIDTH])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [_ROWS, _WIDTH])],
        [numpy_helper.from_array(weight, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class CoreSharing:
    """A probe of whether the host's cores share one core's speed (see the module).

    Compiles the probe model once per core with the oracle codegen (each copy pinned to
    its core, one thread). Use :meth:`open` rather than the constructor: it gives None
    where no probe can run (fewer than two cores, no oracle codegen, or one that cannot
    compile it), and the tune then goes on without one.
    """

    def __init__(self, compiled: Sequence[CompiledSubgraph], feeds: dict[str, np.ndarray]) -> None:
        self._compiled, self._feeds = list(compiled), feeds

    @classmethod
    def open(cls) -> CoreSharing | None:
        """A probe over every core this process may use, or None where none can run."""
        device = HostDevice()
        oracle = codegen_for(Role.ORACLE)
        if len(device.units) < 2 or oracle is None or not oracle.available():
            return None
        graph = load_graph(_matmul_chain(), simplify_graph=False)
        feeds = {"x": np.random.default_rng(1).standard_normal((_ROWS, _WIDTH), np.float32)}
        inputs = [*graph.inputs, *graph.constants]
        try:
            compiled = [
                oracle.compile(
                    graph, graph.nodes, inputs, graph.outputs, Placement(device, unit.index)
                )
                for unit in device.units
            ]
        except AutopartError:
            return None
        probe = cls(compiled, feeds)
        probe.ratio()  # the first probe of a process reads high (1.4) while its threads start
        return probe

    def _time(self, index: int, start: threading.Barrier | None, times: list[float]) -> None:
        """Run copy ``index`` once untimed, then :data:`PROBE_RUNS` times; append the mean."""
        subgraph, env = self._compiled[index], dict(self._feeds)
        subgraph.run(env)
        if start is not None:
            start.wait()
        began = time.perf_counter()
        for _ in range(PROBE_RUNS):
            subgraph.run(dict(self._feeds))
        times.append((time.perf_counter() - began) / PROBE_RUNS)

    def timings(self) -> tuple[float, float]:
        """Seconds per probe run on the first core alone, then on every core at once.

        The second is the slowest core's: work split over the cores waits for it.
        """
        alone: list[float] = []
        self._time(0, None, alone)
        together: list[float] = []
        start = threading.Barrier(len(self._compiled))
        threads = [
            threading.Thread(target=self._time, args=(index, start, together))
            for index in range(len(self._compiled))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return alone[0], max(together) if together else alone[0]

    def ratio(self) -> float:
        """How much longer the probe takes on every core at once than on the first alone.

        About 1 while the cores compute side by side; about 2 while two share one's speed.
        """
        alone, together = self.timings()
        return together / max(alone, 1e-9)

    def shared(self) -> bool:
        """Whether the cores share one core's speed now: :meth:`ratio` over the limit."""
        return self.ratio() > CORE_SHARING.core_sharing_limit


@functools.cache
def process_probe() -> CoreSharing | None:
    """One probe for the whole process, opened on first use (None where none can run)."""
    return CoreSharing.open()


class _Counted(Protocol):
    shared_rounds: int


def shared_note(measured: Mapping[str, _Counted]) -> list[str]:
    """A note on the rounds dropped because the cores shared one core's speed, if any."""
    dropped = max((result.shared_rounds for result in measured.values()), default=0)
    if not dropped:
        return []
    return [
        f"{dropped} timed round{'s were' if dropped > 1 else ' was'} run again: right after "
        f"{'them' if dropped > 1 else 'it'} both cores together ran at one core's speed "
        f"(a probe took over {CORE_SHARING.core_sharing_limit}x its time alone), which slows "
        "only the runners on several cores"
    ]
