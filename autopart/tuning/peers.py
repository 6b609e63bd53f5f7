"""The peers a user would run instead of autopart, each a library as installed.

Each codegen declares the peers it offers (:meth:`~autopart.targets.codegen.Codegen.peers`,
:class:`~autopart.targets.peer.Peer`): a library alone at its defaults, such as one
onnxruntime session with default options, or OpenVINO as installed and in f32. This
module runs those of the installed codegens. Benchmarks time them side by side with
autopart's plans and report the ratio to each and to the best of them, with each one's
output error; a peer is never given autopart's settings. A peer runs the model as the user
gave it: when import froze inputs (``--freeze``), the peer is fed their values instead
(:class:`~autopart.targets.peer.PeerInputs`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np

from autopart.errors import ExecutionError
from autopart.host_memory import release_freed_memory
from autopart.ir.target import HOST_DEVICE
from autopart.search.candidates import Candidate
from autopart.targets.peer import Peer, PeerInputs, PeerModel, Runner, peer_model
from autopart.targets.registry import declared_peers

__all__ = [
    "Peer",
    "PeerInputs",
    "PeerModel",
    "Runner",
    "peer_equivalents",
    "peer_lingers",
    "peer_model",
    "peer_names",
    "peer_precision",
    "peers",
]


def peers(
    model: PeerModel,
    inputs: PeerInputs | None = None,
    skip: Collection[str] = (),
    only: str | None = None,
    failures: dict[str, str] | None = None,
) -> tuple[dict[str, Runner], list[str]]:
    """Every peer this machine can run for ``model``, by name, and why any other could not.

    ``inputs`` say how import fixed the inputs (:meth:`PeerInputs.of` the imported graph);
    each peer runs ``model`` as it is, fed the frozen values. The peers are those of the
    installed codegens, but for those named in ``skip`` (not built), or only the one named
    ``only`` (None: all). A library that
    rejects the model is left out with a one-line reason: a user could not have run it
    that way either (in ``failures`` too, by name, when given).

    The runners come in the order the codegens declare them, but a ``tool`` peer is built
    first: quantising vgg19 with NNCF took 3 GiB for a while, which no longer comes on top
    of the other peers' compiled models.
    """
    found: dict[str, Runner] = {}
    notes: list[str] = []
    declared = [p for p in declared_peers(available=True) if p.name not in skip]
    for peer in sorted(declared, key=lambda p: not p.tool):  # tool peers first: see above
        if only not in (None, peer.name):
            continue
        try:
            found[peer.name] = _guarded(peer.build(model, inputs))
        except Exception as error:  # no library's exception types are specific
            first = _last_line(error)
            notes.append(f"{peer.name} could not run this model: {first}")
            if failures is not None:
                failures[peer.name] = first
        release_freed_memory()  # the model's copies its compile made and let go
    return {p.name: found[p.name] for p in declared if p.name in found}, notes


def _last_line(error: BaseException) -> str:
    """A library's error in one line: its last (the cause, in OpenVINO's), at most 200 chars."""
    return (str(error).strip().splitlines() or [type(error).__name__])[-1][:200]


def _guarded(runner: Runner) -> Runner:
    """``runner``, whose library's failure to run becomes one :class:`ExecutionError` line.

    A peer built may still fail on a run (onnxruntime's QuantizeLinear on an already
    quantised model's int8 weights): the measurement then drops that peer with its reason,
    as it drops a plan a library rejects, instead of the command ending in a traceback.
    """

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return runner(feeds)
        except Exception as error:  # no library's exception types are specific
            raise ExecutionError(_last_line(error)) from None

    return run


def peer_names() -> list[str]:
    """The name of every peer the registered codegens offer, installed or not."""
    return [peer.name for peer in declared_peers()]


def peer_lingers() -> dict[str, float]:
    """How long each peer's threads keep cores busy after a run, by name (see measure_plans)."""
    return {peer.name: peer.linger_s for peer in declared_peers()}


def peer_precision(name: str) -> str | None:
    """The precision the peer ``name`` computes in, as a target names it (None: f32).

    A library as installed computes in its default (OpenVINO: bf16 where the CPU has it);
    an unknown name is taken as f32.
    """
    for peer in declared_peers():
        if peer.name == name:
            return peer.precision()
    return None


def peer_equivalents(candidates: Mapping[str, Candidate]) -> dict[str, str]:
    """Each peer's configuration among ``candidates``: the plan it amounts to, by peer name.

    That is the one-target candidate of the peer's codegen and precision on the whole host
    device (its single-target plan, or the library running the whole model as shipped where
    per node it could not: :func:`autopart.search.baselines.whole_models`), run as one
    partition with no node off its target: its codegen compiles a plan's only partition as
    the library compiles a model alone (onnxruntime at its default session options,
    OpenVINO with the LATENCY hint and the precision, which are its defaults). Peers with no
    such candidate are left out.
    """
    found: dict[str, str] = {}
    for peer in declared_peers():
        if not peer.stands_for_plan:
            continue
        precision = peer.precision()
        for name, candidate in candidates.items():
            target = candidate.target
            if (
                candidate.kind.one_target
                and target is not None
                and target.codegen == peer.codegen
                and target.precision == precision
                and target.unit is None
                and target.device == HOST_DEVICE
                and candidate.off_target_nodes == 0
                and len(candidate.plan.partitions) == 1
            ):
                found[peer.name] = name
                break
    return found
