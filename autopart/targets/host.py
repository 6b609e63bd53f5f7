"""The host device: the CPU this process runs on, and its units, single cores.

Every codegen of ``cpu`` devices runs on it; the registry's device discovery
(:func:`~autopart.targets.devices.discover`) always starts from it.
"""

from __future__ import annotations

import os
import platform
from typing import Any

import numpy as np

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
        """CPU model, the cores this process may run on, and numpy's version.

        The cores are those of the process's affinity (its units), so a process kept to
        some cores (a host of a ``local:N`` cluster, ``taskset``) is a machine of its own,
        with a profile of its own.
        """
        return {
            "kind": "cpu",
            "processor": cpu_model(),
            "machine": platform.machine(),
            "cores": len(self.units) or os.cpu_count(),
            "numpy": np.__version__,
        }


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what the platform module says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
