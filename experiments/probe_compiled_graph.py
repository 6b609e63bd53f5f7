"""Does a Ray Compiled Graph carry values between two nodes of a ``local:2`` cluster?

Issue #47 asked for Ray Compiled Graphs (a fixed graph of actors, per-call overhead under
50 us by Ray's documentation) or actors with fixed channels. This probe compiles the
smallest graph across two Ray nodes started on this machine (the driver on the head, one
actor on the other node, ``x -> actor.f(x) -> driver``) and executes it ten times.

Measured with Ray 2.60 on 2026-12-06: the first execution returns, the second waits
until the channel's read times out, and the other node's raylet stops on a failed check
in ``experimental_mutable_object_provider.cc`` ("Channel closed"). Within one node the
same graph runs (two hops, 4 KB: 0.8 ms an execution). autopart's executor therefore
uses fixed channels of its own (:mod:`autopart.cluster.channels`). Run it again on a
newer Ray to see whether cross-node compiled graphs work there.
"""

from __future__ import annotations

import logging
import os
import time

os.environ.setdefault("RAY_CGRAPH_get_timeout", "20")

import numpy as np
import ray
from ray.cluster_utils import Cluster
from ray.dag import InputNode
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=0)
class Stage:
    """An actor that adds one."""

    def f(self, x: np.ndarray) -> np.ndarray:
        """``x`` plus one."""
        return x + 1


def main() -> None:
    """Compile the two-node graph, execute it ten times, and print what each took."""
    common = {"object_store_memory": 1 << 30, "include_dashboard": False}
    started = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, **common})
    started.add_node(num_cpus=1, **common)
    started.wait_for_nodes()
    ray.init(address=started.address, logging_level=logging.ERROR, log_to_driver=False)
    here = ray.get_runtime_context().get_node_id()
    other = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != here)
    actor = Stage.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(other, soft=False)
    ).remote()
    with InputNode() as feed:
        graph = actor.f.bind(feed)
    compiled = graph.experimental_compile()
    x = np.zeros(1000, np.float32)
    try:
        for index in range(10):
            began = time.perf_counter()
            result = ray.get(compiled.execute(x))
            print(f"execution {index}: {(time.perf_counter() - began) * 1e3:.2f} ms, "
                  f"result {float(result[0])}")  # fmt: skip
        print("cross-node compiled graphs work here")
    except Exception as error:  # Ray's channel timeout, or the actor lost with the raylet
        print(f"cross-node compiled graph failed: {type(error).__name__}: "
              f"{str(error).splitlines()[0]}")  # fmt: skip
    finally:
        ray.shutdown()
        started.shutdown()


if __name__ == "__main__":
    main()
