"""The device contract: :class:`Device` and its :class:`Unit` lanes.

A :class:`Device` is one memory space with compute attached. Its units are lanes that run
at the same time and share the device's memory. Each device kind lives in its own small
class written against this contract: ``to_host``, ``from_host``, ``synchronize``,
``describe``. The host device lives in :mod:`autopart.targets.host` and discovery in
:mod:`autopart.targets.devices`; other devices live in the folder of the codegen that runs
on them, which finds them (:meth:`~autopart.targets.codegen.Codegen.discover_devices`).
All build on this module alone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from autopart.errors import TargetError


@dataclass(frozen=True)
class Unit:
    """An execution lane of a device: a CPU core group or an OpenCL sub-device."""

    index: int
    description: str
    cores: tuple[int, ...] = ()


class Device(ABC):
    """One memory space with compute attached; a tensor lives on exactly one device."""

    name: str
    kind: str
    units: list[Unit]

    @abstractmethod
    def to_host(self, tensor: Any) -> np.ndarray:
        """Copy a tensor resident on this device to a host numpy array."""

    @abstractmethod
    def from_host(self, array: np.ndarray, unit: int | None = None) -> Any:
        """Copy a host array onto this device (through ``unit``'s queue where it matters)."""

    def synchronize(self, unit: int | None = None) -> None:  # noqa: B027 - no-op when synchronous
        """Wait for the work queued on ``unit`` (or on the whole device) to finish."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Hardware, driver and library facts that identify this device (for fingerprints)."""

    def unit(self, index: int | None) -> Unit | None:
        """The unit ``index`` (``None`` for the whole device); the error lists the units."""
        if index is None:
            return None
        for unit in self.units:
            if unit.index == index:
                return unit
        available = ", ".join(f"{self.name}/{u.index}" for u in self.units) or "none"
        raise TargetError(f"device {self.name} has no unit {index}; units: {available}")
