"""Devices and their units: discovery, host transfers, and the machine fingerprint.

A :class:`Device` is one memory space with compute attached. Its units are lanes that run
at the same time and share the device's memory. Each device kind lives in its own small
class written against the same contract: ``to_host``, ``from_host``, ``synchronize``,
``describe``. The contract (:class:`Device`, :class:`Unit`) is defined in
:mod:`autopart.targets.device_contract` and re-exported here.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from autopart.errors import TargetError
from autopart.ir.target import HOST_DEVICE
from autopart.targets.device_contract import Device, Unit


class HostDevice(Device):
    """The host CPU. Its units are single cores this process may run on."""

    name = HOST_DEVICE
    kind = "cpu"

    def __init__(self) -> None:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.units = [Unit(i, f"core {core}", (core,)) for i, core in enumerate(cores)]

    def to_host(self, tensor: Any) -> np.ndarray:
        """Host tensors are numpy arrays already."""
        return tensor

    def from_host(self, array: np.ndarray, unit: int | None = None) -> np.ndarray:
        """Host tensors are numpy arrays already."""
        return array

    def describe(self) -> dict[str, Any]:
        """CPU model, core count and numpy version."""
        return {
            "kind": "cpu",
            "processor": _cpu_model(),
            "machine": platform.machine(),
            "cores": os.cpu_count(),
            "numpy": np.__version__,
        }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
    """Find the host and every OpenCL device (OpenCL is skipped when pyopencl is absent)."""
    machine = Machine({HOST_DEVICE: HostDevice()})
    try:
        from autopart.targets.opencl.device import discover_opencl_devices
    except ImportError:
        return machine
    for device in discover_opencl_devices():
        machine.devices[device.name] = device
    return machine
