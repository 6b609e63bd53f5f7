"""Whether this machine has a usable OpenCL device, for the tests that need one.

PoCL's compiler refuses CPUs its LLVM does not know ("unknown target CPU 'generic'"), and
discovery then leaves the device out (``autopart devices`` says so). Tests whose point is a
second device with copies to it need one; tests that only want a second kind of target use
:data:`SECOND_UNIT_TARGET`, a unit of OpenVINO on the host when there is no OpenCL device.
"""

from __future__ import annotations

import pytest

from autopart.targets.opencl.device import discover_opencl_devices

HAVE_OPENCL = bool(discover_opencl_devices())
needs_opencl = pytest.mark.skipif(
    not HAVE_OPENCL, reason="no usable OpenCL device here (`autopart devices` says why)"
)
SECOND_UNIT_TARGET = "opencl:0/0@opencl" if HAVE_OPENCL else "cpu/0@openvino"
