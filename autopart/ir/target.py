"""Virtual devices: the (host, device, unit, codegen, precision) tuple carried by every IR node.

The text form is ``[host:]device[/unit][@codegen[:precision]]``: ``cpu@numpy``,
``opencl:0/1@opencl``, ``cpu@openvino:bf16``, ``cpu/0@openvino:bf16``,
``host1:cpu@openvino``. A precision is named only after a codegen (``cpu:0`` would read as
a device index). A target without a precision computes in f32, the reference:
``cpu@openvino:f32`` is ``cpu@openvino``. A host is a machine of a cluster; a target
without one is on the local machine, as every target written before hosts existed
(``local:cpu@numpy`` is ``cpu@numpy``). A host name starts with a letter and is followed
by ``:`` and the device's name, so ``opencl:0`` stays a device index; ``cpu`` and the
precisions name no host or device, so ``cpu:bf16`` is refused (a precision follows a
codegen).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from autopart.errors import TargetError

HOST_DEVICE = "cpu"  # the host's device name: graph inputs start there, outputs end there
REFERENCE_PRECISION = "f32"  # what a target without a precision computes in
# Every precision a target may name, most exact first (a codegen offers a subset).
PRECISIONS = (REFERENCE_PRECISION, "bf16", "int8")
LOCAL_HOST = "local"  # the machine autopart runs on: a target names no host for it
HOST_NAMES = "host{}"  # a cluster's hosts, in order: host0 is the machine autopart runs on
FIRST_HOST = HOST_NAMES.format(0)

_HOST = re.compile(r"^[A-Za-z][\w.-]*$")
_SPEC = re.compile(
    r"^(?:(?P<host>[A-Za-z][\w.-]*):(?=[A-Za-z_]))?"
    r"(?P<device>[A-Za-z_][\w]*(?::\d+)?)?(?:/(?P<unit>\d+))?"
    r"(?:@(?P<codegen>[A-Za-z_][\w-]*)(?::(?P<precision>[A-Za-z0-9_]+))?)?$"
)


@dataclass(frozen=True, slots=True)
class VirtualDevice:
    """Where a node runs: ``device`` (memory space), ``unit`` (lane), ``codegen``, ``precision``.

    ``host`` is the machine of a cluster (None: the local one, also when written
    :data:`LOCAL_HOST`). Each part is optional; an all-``None`` virtual device means "not
    yet planned".
    ``precision`` is None for f32 (the reference) and otherwise one of :data:`PRECISIONS`;
    which ones a codegen offers on a machine is the codegen's to say
    (:meth:`autopart.targets.codegen.Codegen.precisions`).
    """

    device: str | None = None
    unit: int | None = None
    codegen: str | None = None
    precision: str | None = None
    host: str | None = None
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._normalise()
        # searches hash targets millions of times (dict keys): hash the fields once
        object.__setattr__(
            self, "_hash", hash((self.device, self.unit, self.codegen, self.precision, self.host))
        )

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[VirtualDevice], tuple[str | int | None, ...]]:
        # rebuilt by its fields, so that the hash is the receiving process's (Ray sends
        # targets between processes whose string hashes differ)
        return VirtualDevice, (self.device, self.unit, self.codegen, self.precision, self.host)

    def _normalise(self) -> None:
        """The local host as None, f32 as None; :class:`TargetError` for a bad host or precision."""
        if self.host == LOCAL_HOST:
            object.__setattr__(self, "host", None)
        elif self.host is not None and not _HOST.match(self.host):
            raise TargetError(
                f"malformed host {self.host!r}: a letter, then letters, digits, '_', '.' or '-'"
            )
        if self.precision == REFERENCE_PRECISION:
            object.__setattr__(self, "precision", None)
        elif self.precision is not None and self.precision not in PRECISIONS:
            raise TargetError(
                f"unknown precision {self.precision!r}; precisions: {', '.join(PRECISIONS)}"
            )

    @classmethod
    def parse(cls, spec: str) -> VirtualDevice:
        """Parse ``[host:]device[/unit][@codegen[:precision]]``; :class:`TargetError` if bad.

        Memoised: a plan's assignment names a handful of targets across up to 50,000 nodes.
        """
        return _parsed(cls, spec)

    @classmethod
    def _parse_uncached(cls, spec: str) -> VirtualDevice:
        match = _SPEC.match(spec.strip())
        named_host = match.group("host") if match else None
        if (
            not match
            or not spec.strip()
            or (named_host and not match.group("device"))
            # cpu:bf16 is a precision without a codegen, not a device bf16 on a host "cpu"
            or named_host == HOST_DEVICE
            or match.group("device") in PRECISIONS
        ):
            raise TargetError(
                f"malformed target {spec!r}: expected [host:]device[/unit][@codegen[:precision]], "
                "e.g. cpu@numpy, cpu@openvino:bf16 or host1:cpu@openvino"
            )
        unit = match.group("unit")
        return cls(
            match.group("device"),
            int(unit) if unit is not None else None,
            match.group("codegen"),
            match.group("precision"),
            match.group("host"),
        )

    @property
    def is_set(self) -> bool:
        """Whether any part of the virtual device has been chosen."""
        return self.device is not None or self.unit is not None or self.codegen is not None

    @property
    def is_complete(self) -> bool:
        """Whether a device and a codegen are chosen (a runnable target; the unit may be unset)."""
        return self.device is not None and self.codegen is not None

    @property
    def computes_in(self) -> str:
        """The precision this target computes in: ``f32`` when none is named."""
        return self.precision or REFERENCE_PRECISION

    @property
    def reduced(self) -> bool:
        """Whether this target computes in less than f32 (its outputs are approximate)."""
        return self.precision is not None

    def at_precision(self, precision: str | None) -> VirtualDevice:
        """The same target computing in ``precision`` (None or ``f32``: the reference)."""
        return VirtualDevice(self.device, self.unit, self.codegen, precision, self.host)

    @property
    def memory_space(self) -> str:
        """The memory this target's values live in: its device, on its host (``host1:cpu``)."""
        device = self.device or ""
        return device if self.host is None else f"{self.host}:{device}"

    def narrow(self, other: VirtualDevice) -> VirtualDevice | None:
        """The parts of both together, or ``None`` when they set some part differently.

        A precision is part of the codegen: it narrows only where the codegen is named,
        and an unnamed precision (f32) agrees with a named one only when no codegen is set.
        A host is a part as the device is: an unnamed one agrees with any.
        """
        if not (
            _agree(self.host, other.host)
            and _agree(self.device, other.device)
            and _agree(self.unit, other.unit)
            and _agree(self.codegen, other.codegen)
        ):
            return None
        if self.codegen is not None and other.codegen is not None:
            if self.precision != other.precision:
                return None
            precision = self.precision
        else:
            precision = self.precision if self.codegen is not None else other.precision
        return VirtualDevice(
            self.device if self.device is not None else other.device,
            self.unit if self.unit is not None else other.unit,
            self.codegen if self.codegen is not None else other.codegen,
            precision,
            self.host if self.host is not None else other.host,
        )

    def __str__(self) -> str:
        text = self.device or ""
        if self.unit is not None:
            text += f"/{self.unit}"
        if self.codegen is not None:
            text += f"@{self.codegen}"
            if self.precision is not None:
                text += f":{self.precision}"
        if self.host is not None:
            text = f"{self.host}:{text}"
        return text or "<unplanned>"


def _agree(mine: object, theirs: object) -> bool:
    return mine is None or theirs is None or mine == theirs


UNPLANNED = VirtualDevice()


@functools.lru_cache(maxsize=4096)
def _parsed(cls: type[VirtualDevice], spec: str) -> VirtualDevice:
    """:meth:`VirtualDevice.parse`, remembered (a target is immutable; errors are not kept)."""
    return cls._parse_uncached(spec)
