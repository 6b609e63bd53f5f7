"""Each host's devices, codegens, precisions and fingerprint, as found on the host itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autopart.cluster.session import Host, import_ray, lost_host

DESCRIBE_TIMEOUT_S = 300.0  # discovery imports every codegen's library and probes OpenCL


@dataclass(frozen=True)
class HostDescription:
    """What ``autopart devices`` lists, for one host of a cluster.

    ``devices`` are :func:`~autopart.targets.resolve.device_rows` rows; ``targets`` the
    target texts it offers (without the host); ``left_out`` lines name devices a codegen
    left out, and why.
    """

    host: Host
    devices: list[dict[str, str]]
    targets: list[str]
    fingerprint: str
    left_out: list[str]


def describe_hosts(hosts: Sequence[Host]) -> list[HostDescription]:
    """Discover every host's machine in a Ray task pinned to it, in ``hosts``' order.

    :class:`~autopart.cluster.session.HostLostError` names a host that was lost or did not answer in
    :data:`DESCRIBE_TIMEOUT_S`.
    """
    ray = import_ray()
    task = ray.remote(num_cpus=0, max_retries=0)(_describe_here)
    pending = [task.options(scheduling_strategy=h.placement()).remote(h) for h in hosts]
    found = []
    for host, reference in zip(hosts, pending, strict=True):
        try:
            facts = ray.get(reference, timeout=DESCRIBE_TIMEOUT_S)
        except Exception as error:  # a lost node, a timeout: Ray's errors are of many types
            raise lost_host([host], f"describing its machine ({host.address})", error) from None
        found.append(HostDescription(host, facts["devices"], facts["targets"],
                                     facts["fingerprint"], facts["left_out"]))  # fmt: skip
    return found


def _describe_here(host: Host) -> dict[str, Any]:
    """The machine of the calling process, pinned to ``host``'s cores first (runs on the host)."""
    from autopart.targets.devices import discover
    from autopart.targets.registry import codegen_names, get_codegen
    from autopart.targets.resolve import available_targets, device_rows

    host.pin()
    machine = discover()
    left_out = [
        f"the {codegen} device {name!r}: {why}"
        for codegen in codegen_names()
        for name, why in get_codegen(codegen).left_out_devices()
    ]
    return {
        "devices": device_rows(machine),
        "targets": [str(t) for t in available_targets(machine)],
        "fingerprint": machine.fingerprint(),
        "left_out": left_out,
    }
