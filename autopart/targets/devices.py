"""Devices and their units: discovery and the machine fingerprint.

A :class:`Device` is one memory space with compute attached. Its units are lanes that run
at the same time and share the device's memory. Each device kind lives in its own small
class written against the same contract: ``to_host``, ``from_host``, ``synchronize``,
``describe``. The contract (:class:`Device`, :class:`Unit`) is defined in
:mod:`autopart.targets.device_contract`, the host (:class:`HostDevice`) in
:mod:`autopart.targets.host`; both are re-exported here. Every other device is found by
the codegen that runs on it (:meth:`~autopart.targets.codegen.Codegen.discover_devices`).
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import dataclass, field
from functools import cache

from autopart.errors import TargetError
from autopart.ir.target import HOST_DEVICE
from autopart.targets.device_contract import Device, Unit
from autopart.targets.host import HostDevice
from autopart.targets.registry import codegen_names, get_codegen

__all__ = ["VOLATILE_FACTS", "Device", "HostDevice", "Machine", "Unit", "discover"]

VOLATILE_FACTS = frozenset({"global_memory"})


@dataclass
class Machine:
    """Every device found on this machine, by name."""

    devices: dict[str, Device] = field(default_factory=dict)

    def device(self, name: str) -> Device:
        """The device ``name``; the error lists the devices that exist."""
        try:
            return self.devices[name]
        except KeyError:
            available = ", ".join(self.devices) or "none"
            raise TargetError(f"no device {name!r} on this machine; devices: {available}") from None

    def fingerprint(self) -> str:
        """A stable hash of the hardware, drivers and library versions of every device.

        Facts that drift while the machine runs (``VOLATILE_FACTS``: PoCL reports a share of
        the memory free at start-up as its global memory) are left out, so that one
        machine keeps one fingerprint, and one saved profile.
        """
        facts = {
            name: {k: v for k, v in device.describe().items() if k not in VOLATILE_FACTS}
            for name, device in sorted(self.devices.items())
        }
        facts["python"] = platform.python_version()  # type: ignore[assignment]
        blob = json.dumps(facts, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


@cache
def discover() -> Machine:
    """The host and every device a registered codegen finds, the host first.

    Each codegen's :meth:`~autopart.targets.codegen.Codegen.discover_devices` is asked in
    name order; a device name found twice keeps its first device.
    """
    machine = Machine({HOST_DEVICE: HostDevice()})
    for name in codegen_names():
        for device in get_codegen(name).discover_devices():
            machine.devices.setdefault(device.name, device)
    return machine
