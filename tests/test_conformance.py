"""Every built-in codegen passes the conformance suite on every device it can run on."""

from __future__ import annotations

import pytest

from autopart.targets.resolve import available_targets
from autopart.testing.conformance import CodegenConformance

TARGETS = {str(t) for t in available_targets()}


class TestNumpy(CodegenConformance):
    target = "cpu@numpy"


@pytest.mark.skipif("cpu/0@onnxruntime" not in TARGETS, reason="onnxruntime is not installed")
class TestOnnxRuntimeUnit(CodegenConformance):
    target = "cpu/0@onnxruntime"


@pytest.mark.skipif(
    "opencl:0@opencl" not in TARGETS,
    reason="no OpenCL device (pip install pyopencl pocl-binary-distribution)",
)
class TestOpenCL(CodegenConformance):
    target = "opencl:0@opencl"


@pytest.mark.skipif("opencl:0/1@opencl" not in TARGETS, reason="no OpenCL sub-devices")
class TestOpenCLUnit(CodegenConformance):
    target = "opencl:0/1@opencl"
