"""OpenCL devices: discovery, units by device fission, queues, memory pools and transfers.

Every OpenCL device found (platforms in order, devices in order within each) becomes one
:class:`OpenCLDevice` named ``opencl:<i>``. Its units are the sub-devices of an
``EQUALLY, 1`` fission (one compute unit each) where the device supports it, none otherwise.
One context holds the root device and its sub-devices, so a buffer written through one
unit's queue is readable through any other; each unit has its own in-order,
profiling-enabled command queue and the whole device has one more.

Discovery only enumerates devices and reads their properties (``autopart devices`` calls
it); the context, sub-devices and queues are created on first use. Tensors on these devices
are :class:`pyopencl.array.Array` objects.
"""

from __future__ import annotations

import threading
import warnings
from functools import cache
from typing import Any

import numpy as np

from autopart.errors import TargetError
from autopart.targets.device_contract import Device, Unit

try:
    import pyopencl as cl
    import pyopencl.array as cla
    import pyopencl.tools as cltools
except ImportError:  # optional dependency: discovery finds nothing without it
    cl = None  # type: ignore[assignment]
    cla = None  # type: ignore[assignment]
    cltools = None  # type: ignore[assignment]


def have_pyopencl() -> bool:
    """Whether pyopencl is importable."""
    return cl is not None


# The smallest kernel a working OpenCL C compiler builds; discovery builds it once per device.
_COMPILER_CHECK = "__kernel void autopart_check(__global float *a) { a[get_global_id(0)] += 1; }"


def discover_opencl_devices() -> list[OpenCLDevice]:
    """Every usable OpenCL device on this machine, ``opencl:0``, ``opencl:1``, ... in order.

    A device whose compiler cannot build a one-line kernel (PoCL built against an LLVM
    that does not know this CPU answers "unknown target CPU 'generic'") is left out, and
    :func:`unusable_opencl_devices` says why. Returns an empty list when pyopencl is
    missing, when no ICD platform is installed, or when the OpenCL runtime fails to answer;
    it never raises for lack of OpenCL. The answer is computed once per process.
    """
    return list(_discovered()[0])


def unusable_opencl_devices() -> list[tuple[str, str]]:
    """The OpenCL devices found but left out, as (device name, why), in discovery order."""
    return list(_discovered()[1])


@cache
def _discovered() -> tuple[tuple[OpenCLDevice, ...], tuple[tuple[str, str], ...]]:
    """The usable devices and the unusable ones with their reasons (see the callers)."""
    if cl is None:
        return (), ()
    try:
        platforms = cl.get_platforms()
    except (cl.Error, RuntimeError, OSError):
        return (), ()
    devices: list[OpenCLDevice] = []
    unusable: list[tuple[str, str]] = []
    for platform in platforms:
        try:
            found = platform.get_devices()
        except (cl.Error, RuntimeError):
            continue
        for device in found:
            why = compiler_problem(device)
            if why is None:
                devices.append(OpenCLDevice(f"opencl:{len(devices)}", platform, device))
            else:
                unusable.append((device.name.strip(), why))
    return tuple(devices), tuple(unusable)


def compiler_problem(device: Any) -> str | None:
    """Why ``device``'s OpenCL C compiler cannot build a one-line kernel, or None if it can."""
    try:
        context = cl.Context([device])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pyopencl warns with the build log too
            cl.Program(context, _COMPILER_CHECK).build()
    except (cl.Error, RuntimeError) as error:
        lines = [line.strip() for line in str(error).splitlines()]
        said = [line for line in lines if line.startswith("error:")] or [x for x in lines if x]
        return f"its compiler fails on a one-line kernel: {said[0] if said else 'no reason given'}"
    return None


def _supports_fission(device: Any) -> bool:
    """Whether ``device`` can be split into single-compute-unit sub-devices."""
    try:
        properties = list(device.partition_properties)
        return (
            cl.device_partition_property.EQUALLY in properties
            and device.max_compute_units > 1
            and device.partition_max_sub_devices > 1
        )
    except (cl.Error, AttributeError):
        return False


class OpenCLDevice(Device):
    """One OpenCL device with its units (fission sub-devices), context, queues and pools.

    ``queue(unit)`` returns the in-order, profiling-enabled queue of ``unit`` (``None`` for
    the whole device). ``pool(unit)`` is the memory pool whose buffers are only ever used by
    that queue, so a buffer returned to it can be reused without synchronisation.
    """

    kind = "opencl"

    def __init__(self, name: str, platform: Any, device: Any) -> None:
        self.name = name
        self.platform = platform
        self.cl_device = device
        count = device.max_compute_units if _supports_fission(device) else 0
        count = min(count, device.partition_max_sub_devices) if count else 0
        self.units = [Unit(i, f"{device.name.strip()} compute unit {i}") for i in range(count)]
        self._lock = threading.Lock()
        self._context: Any = None
        self._queues: dict[int | None, Any] = {}
        self._pools: dict[int | None, Any] = {}
        self._transfer_pool: Any = None
        self.programs: dict[tuple[str, str], Any] = {}  # (source, options) -> built Program

    # -- lazily created OpenCL objects ------------------------------------------------------
    def _ensure_context(self) -> None:
        with self._lock:
            if self._context is not None:
                return
            sub_devices: list[Any] = []
            if self.units:
                try:
                    sub_devices = self.cl_device.create_sub_devices(
                        [cl.device_partition_property.EQUALLY, 1]
                    )[: len(self.units)]
                except cl.Error as error:
                    raise TargetError(
                        f"device fission failed on {self.name}: {str(error).splitlines()[0]}"
                    ) from None
            context = cl.Context([self.cl_device, *sub_devices])
            profiling = cl.command_queue_properties.PROFILING_ENABLE
            queues: dict[int | None, Any] = {
                None: cl.CommandQueue(context, self.cl_device, profiling)
            }
            for unit, sub in zip(self.units, sub_devices, strict=False):
                queues[unit.index] = cl.CommandQueue(context, sub, profiling)
            self._queues = queues
            self._pools = {
                key: cltools.MemoryPool(cltools.ImmediateAllocator(queue))
                for key, queue in queues.items()
            }
            self._transfer_pool = cltools.MemoryPool(cltools.ImmediateAllocator(queues[None]))
            self._context = context

    @property
    def context(self) -> Any:
        """The ``pyopencl.Context`` holding the device and all its sub-devices."""
        self._ensure_context()
        return self._context

    def queue(self, unit: int | None = None) -> Any:
        """The command queue of ``unit`` (``None``: the whole device)."""
        self.unit(unit)  # raises TargetError naming the units for an unknown index
        self._ensure_context()
        return self._queues[unit]

    def pool(self, unit: int | None = None) -> Any:
        """The memory pool reserved for the queue of ``unit``."""
        self.unit(unit)
        self._ensure_context()
        return self._pools[unit]

    def shared_pool(self) -> Any:
        """The pool of buffers that any queue of the device may read: copies and outputs.

        A buffer released to it is reused by the next allocation, so release a tensor only
        after the kernels reading it have finished.
        """
        self._ensure_context()
        return self._transfer_pool

    # -- the Device contract ----------------------------------------------------------------
    def to_host(self, tensor: Any) -> np.ndarray:
        """Copy a ``pyopencl.array.Array`` of this device to a numpy array (blocking)."""
        if not isinstance(tensor, cla.Array):
            raise TargetError(
                f"{self.name} holds pyopencl arrays, not {type(tensor).__name__} tensors"
            )
        if tensor.context != self.context:
            raise TargetError(f"tensor does not live on {self.name}")
        if not tensor.flags.forc or tensor.size == 0:
            return tensor.get()
        # One blocking read into a fresh array: Array.get() is up to 15x slower on 64 MiB.
        host = np.empty(tensor.shape, tensor.dtype, order="F" if tensor.flags.f_contiguous else "C")
        cl.enqueue_copy(
            tensor.queue, host, tensor.base_data, src_offset=tensor.offset,
            wait_for=tensor.events, is_blocking=True,
        )  # fmt: skip
        return host

    def from_host(self, array: np.ndarray, unit: int | None = None) -> Any:
        """Copy a host array onto this device through ``unit``'s queue (blocking).

        The tensor keeps the array's shape, rank 0 included (a scalar stays shape ``()``).

        The buffer comes from the device's transfer pool, outside the per-queue pools, so
        it may be read through any queue. Once the tensor is released its buffer is reused
        by later copies: release it only after the kernels reading it have finished, as the
        plan executor does (it drops a tensor after its readers' units are synchronised).
        Reusing buffers keeps large copies linear in size: a fresh 64 MiB allocation costs
        more in page faults than the copy itself.
        """
        data = np.require(array, requirements="C")  # unlike ascontiguousarray, keeps 0-d
        self._ensure_context()
        return cla.to_device(self.queue(unit), data, allocator=self._transfer_pool)

    def synchronize(self, unit: int | None = None) -> None:
        """Wait for the commands queued on ``unit``, or on the device and all its units."""
        if self._context is None:
            return
        if unit is not None:
            self.queue(unit).finish()
            return
        for queue in self._queues.values():
            queue.finish()

    def describe(self) -> dict[str, Any]:
        """Platform, device, driver and pyopencl facts that identify this device."""
        device = self.cl_device
        return {
            "kind": self.kind,
            "platform": self.platform.name.strip(),
            "platform_version": self.platform.version.strip(),
            "device": device.name.strip(),
            "driver_version": device.driver_version.strip(),
            "compute_units": int(device.max_compute_units),
            "global_memory": int(device.global_mem_size),
            "units": len(self.units),
            "pyopencl": cl.VERSION_TEXT,
        }

    def __repr__(self) -> str:
        return f"OpenCLDevice({self.name!r}, {self.cl_device.name.strip()!r})"
