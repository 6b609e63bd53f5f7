"""A cluster of hosts on Ray: joined at an address, or started here as ``local:N``.

``--cluster ADDRESS`` joins a running Ray cluster (``ray start --head`` on one machine,
``ray start --address ...`` on the others). ``--cluster local:N`` starts N Ray nodes on
this machine (``ray.cluster_utils.Cluster``), each with its share of the cores: the
processes a host starts pin themselves to that share (:meth:`Host.pin`), so two hosts of
one core each on a 2-core machine compute side by side as two machines would.

Hosts are named ``host0``, ``host1``, ...: ``host0`` is the node this process runs on (the
local machine, whose targets name no host), then the others by address, or for
``local:N`` in the order they were started. Ray is an optional extra
(``pip install -e '.[ray]'``); without it, asking for a cluster is one error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from autopart.errors import AutopartError
from autopart.ir.target import HOST_NAMES

_LOCAL = re.compile(r"^local:(?P<n>\d+)$")
_HOST_RESOURCE = "autopart_host_{}"  # a custom resource naming each local node
OBJECT_STORE_BYTES = 1 << 30  # each local node's object store (Ray's default: 30% of RAM)
LOSS_WAIT_S = 30.0  # how long Ray may take to mark a lost node dead (its health checks)


class ClusterError(AutopartError):
    """A cluster cannot be started or joined, or a host of it was lost."""


class HostLostError(ClusterError):
    """A host stopped answering while the cluster went on: ``host`` names it."""

    def __init__(self, host: str, doing: str, detail: str) -> None:
        super().__init__(f"host {host} was lost while {doing}: {detail}")
        self.host = host


@dataclass(frozen=True)
class Host:
    """One machine of a cluster: its ``name``, Ray ``node_id``, ``address`` and ``cpus``.

    ``cores`` are the CPU cores its processes keep to (``local:N`` nodes share one
    machine); None where the host is a machine of its own.
    """

    name: str
    node_id: str
    address: str
    cpus: int
    memory_bytes: int
    cores: tuple[int, ...] | None = None

    def pin(self) -> None:
        """Keep the calling process (a task or actor on this host) to this host's cores."""
        if self.cores is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, self.cores)

    def placement(self) -> Any:
        """Ray's scheduling strategy that runs a task or actor on this host, and only there."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(node_id=self.node_id, soft=False)


def import_ray() -> Any:
    """The ``ray`` module; :class:`ClusterError` with the install line where it is missing."""
    try:
        import ray
    except ImportError:
        raise ClusterError(
            "Ray is not installed: pip install -e '.[ray]' (or pip install ray) to use --cluster"
        ) from None
    return ray


@contextmanager
def cluster(spec: str) -> Iterator[list[Host]]:
    """The hosts of the cluster ``spec`` (``local:N`` or a Ray address), shut down after.

    :class:`ClusterError` when Ray is missing, ``spec`` is malformed, or the cluster
    cannot be started or joined.
    """
    ray = import_ray()
    local = _LOCAL.match(spec.strip())
    if local is None and not spec.strip():
        raise ClusterError("--cluster needs local:N or the address of a Ray cluster")
    if ray.is_initialized():
        ray.shutdown()
    started = None
    try:
        if local is not None:
            started = _start_local(ray, int(local["n"]))
            address = started.address
        else:
            address = spec.strip()
        ray.init(
            address=address,
            logging_level=logging.ERROR,
            log_to_driver=False,
            configure_logging=True,
            include_dashboard=False,
        )
        hosts = _hosts(ray, None if local is None else int(local["n"]))
    except ClusterError:
        _stop(ray, started)
        raise
    except Exception as error:  # Ray's own errors are of many types
        _stop(ray, started)
        raise ClusterError(f"cannot reach the Ray cluster {spec!r}: {_first_line(error)}") from None
    quiet = _quiet_node_reports(ray)
    try:
        yield hosts
    finally:
        quiet()
        _stop(ray, started)


def _start_local(ray: Any, count: int) -> Any:
    """``count`` Ray nodes on this machine, each with its share of the cores."""
    from ray.cluster_utils import Cluster

    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cores = cores or list(range(os.cpu_count() or 1))
    if not 1 <= count <= len(cores):
        raise ClusterError(
            f"--cluster local:{count}: this machine has {len(cores)} cores; "
            f"local:N takes 1 to {len(cores)} nodes of at least one core each"
        )
    share = len(cores) // count
    common = {"object_store_memory": OBJECT_STORE_BYTES, "include_dashboard": False}
    started = Cluster(
        initialize_head=True,
        head_node_args={**common, "num_cpus": share, "resources": {_HOST_RESOURCE.format(0): 1}},
    )
    for index in range(1, count):
        started.add_node(num_cpus=share, resources={_HOST_RESOURCE.format(index): 1}, **common)
    started.wait_for_nodes()
    return started


def _hosts(ray: Any, local_count: int | None) -> list[Host]:
    """The cluster's live nodes as named hosts, this process's node first."""
    alive = [node for node in ray.nodes() if node.get("Alive")]
    here = ray.get_runtime_context().get_node_id()
    if local_count is not None:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        share = max(len(cores) // local_count, 1)

        def index(node: dict[str, Any]) -> int:
            named = [k for k in node["Resources"] if k.startswith(_HOST_RESOURCE.format(""))]
            return int(named[0].rsplit("_", 1)[1]) if named else local_count

        ordered = sorted(alive, key=index)
        return [
            _host(
                HOST_NAMES.format(i),
                node,
                tuple(cores[index(node) * share : (index(node) + 1) * share]),
            )
            for i, node in enumerate(ordered)
        ]
    ordered = sorted(
        alive,
        key=lambda n: (n["NodeID"] != here, n["NodeManagerAddress"], n["NodeManagerPort"]),
    )
    return [_host(HOST_NAMES.format(i), node, None) for i, node in enumerate(ordered)]


def _host(name: str, node: dict[str, Any], cores: tuple[int, ...] | None) -> Host:
    resources = node.get("Resources", {})
    return Host(
        name,
        str(node["NodeID"]),
        str(node["NodeManagerAddress"]),
        int(resources.get("CPU", 0)),
        int(resources.get("memory", 0)),
        cores or None,
    )


def _stop(ray: Any, started: Any) -> None:
    """Disconnect, and stop the nodes this process started."""
    if ray.is_initialized():
        ray.shutdown()
    if started is not None:
        started.shutdown()


def _quiet_node_reports(ray: Any) -> Any:
    """Stop the driver printing Ray's reports of its nodes; a function that undoes it.

    A Ray driver prints every error its raylets publish (a node marked dead, a worker
    killed) to stdout, whatever ``log_to_driver`` says. autopart reports a lost host itself,
    as one line (:class:`HostLostError`), so those reports (``pid`` ``raylet``) are dropped.
    """
    module = getattr(getattr(ray, "_private", None), "worker", None)
    printer = getattr(module, "print_to_stdstream", None)
    if printer is None:
        return lambda: None

    def without_node_reports(data: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        if data.get("pid") != "raylet":
            printer(data, *args, **kwargs)

    module.print_to_stdstream = without_node_reports

    def restore() -> None:
        module.print_to_stdstream = printer

    return restore


def stop_actor(ray: Any, actor: Any) -> None:
    """Kill ``actor``; one whose host was lost is gone already, and that is no error."""
    with contextlib.suppress(Exception):
        ray.kill(actor)


def lost_host(hosts: Sequence[Host], doing: str, error: BaseException) -> HostLostError:
    """The :class:`HostLostError` for ``error``, raised while ``doing`` something on ``hosts``.

    With one host, it is that one. With several (a transfer between two, a stage whose
    inputs came from another), it is the first the cluster marks dead within
    :data:`LOSS_WAIT_S` (Ray's health checks take seconds to notice), else the first.
    """
    detail = type(error).__name__
    if len(hosts) > 1:
        ray = import_ray()
        deadline = time.monotonic() + LOSS_WAIT_S
        while time.monotonic() < deadline:
            try:
                alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
            except Exception:  # the cluster itself is gone
                break
            dead = [host for host in hosts if host.node_id not in alive]
            if dead:
                return HostLostError(dead[0].name, doing, detail)
            time.sleep(0.5)
    return HostLostError(hosts[0].name, doing, detail)


def one_line(error: BaseException) -> str:
    """``error`` as a host reports it: autopart's own message, else its type and message."""
    return str(error) if isinstance(error, AutopartError) else f"{type(error).__name__}: {error}"


def remote_refusal(error: Exception) -> str | None:
    """What autopart's own code raised on a host, as one line; None for a lost host.

    Ray wraps a method's exception (``cause``, as raised) and an actor constructor's (as
    text only, ``actor_init_failed``); anything else (a node gone, an object lost with
    it, a timeout) is a loss.
    """
    cause = getattr(error, "cause", None)
    if isinstance(cause, Exception) and not _is_ray_loss(cause):
        return one_line(cause)
    if getattr(error, "actor_init_failed", False):
        last = str(error).strip().splitlines()[-1]
        kind, _, message = last.partition(": ")
        return message if kind.startswith("autopart.") else last
    return None


def _is_ray_loss(error: Exception) -> bool:
    """Whether ``error`` is Ray's own (a node, actor, worker or object lost), not the code's."""
    module = type(error).__module__
    return module.startswith("ray.") and type(error).__name__ != "RayTaskError"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
