"""The OpenCL target: devices with fission units, and the ``opencl`` codegen.

Importing this package registers the ``opencl`` codegen. pyopencl is optional: without
it, discovery finds no devices and the codegen reports itself unavailable.
"""

from autopart.targets.opencl.codegen import OpenCLCodegen
from autopart.targets.opencl.device import OpenCLDevice, discover_opencl_devices
from autopart.targets.opencl.programs import KernelBuildError

__all__ = ["KernelBuildError", "OpenCLCodegen", "OpenCLDevice", "discover_opencl_devices"]
