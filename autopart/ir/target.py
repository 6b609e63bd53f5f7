"""Virtual devices: the (device, unit, codegen) triple carried by every IR node."""

from __future__ import annotations

import re
from dataclasses import dataclass

from autopart.errors import TargetError

HOST_DEVICE = "cpu"  # the host's device name: graph inputs start there, outputs end there

_SPEC = re.compile(
    r"^(?P<device>[A-Za-z_][\w]*(?::\d+)?)?(?:/(?P<unit>\d+))?(?:@(?P<codegen>[A-Za-z_][\w-]*))?$"
)


@dataclass(frozen=True, slots=True)
class VirtualDevice:
    """Where a node runs: ``device`` (memory space), ``unit`` (lane) and ``codegen``.

    Each part is optional; an all-``None`` virtual device means "not yet planned".
    The text form is ``device[/unit][@codegen]``, e.g. ``cpu@numpy`` or ``opencl:0/1@opencl``.
    """

    device: str | None = None
    unit: int | None = None
    codegen: str | None = None

    @classmethod
    def parse(cls, spec: str) -> VirtualDevice:
        """Parse ``device[/unit][@codegen]``; raise :class:`TargetError` when malformed."""
        match = _SPEC.match(spec.strip())
        if not match or not spec.strip():
            raise TargetError(
                f"malformed target {spec!r}: expected device[/unit][@codegen], e.g. cpu@numpy"
            )
        unit = match.group("unit")
        return cls(
            match.group("device"), int(unit) if unit is not None else None, match.group("codegen")
        )

    @property
    def is_set(self) -> bool:
        """Whether any part of the virtual device has been chosen."""
        return self.device is not None or self.unit is not None or self.codegen is not None

    @property
    def is_complete(self) -> bool:
        """Whether a device and a codegen are chosen (a runnable target; the unit may be unset)."""
        return self.device is not None and self.codegen is not None

    def narrow(self, other: VirtualDevice) -> VirtualDevice | None:
        """The parts of both together, or ``None`` when they set some part differently."""
        if not (
            _agree(self.device, other.device)
            and _agree(self.unit, other.unit)
            and _agree(self.codegen, other.codegen)
        ):
            return None
        return VirtualDevice(
            self.device if self.device is not None else other.device,
            self.unit if self.unit is not None else other.unit,
            self.codegen if self.codegen is not None else other.codegen,
        )

    def __str__(self) -> str:
        text = self.device or ""
        if self.unit is not None:
            text += f"/{self.unit}"
        if self.codegen is not None:
            text += f"@{self.codegen}"
        return text or "<unplanned>"


def _agree(mine: object, theirs: object) -> bool:
    return mine is None or theirs is None or mine == theirs


UNPLANNED = VirtualDevice()
