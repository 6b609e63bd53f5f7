"""OpenCL C sources and program builds: loaded from package data, built once, cached.

Kernel sources live in ``kernels/*.cl`` next to this module; every program is prefixed with
``kernels/common.cl``. A program is built once per (device context, source, options) and
kept on the :class:`~autopart.targets.opencl.device.OpenCLDevice`; binaries go to a cache
folder that autopart controls (where the driver does not cache builds itself). A build
failure raises :class:`KernelBuildError` naming the op, the node and the device.
"""

from __future__ import annotations

import os
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from autopart.errors import TargetError
from autopart.targets.opencl.device import OpenCLDevice, cl

BUILD_OPTIONS = "-cl-mad-enable"


class KernelBuildError(TargetError):
    """An OpenCL program failed to build; the message names the op, node and device."""


def cache_dir() -> Path:
    """Where compiled OpenCL binaries are cached: ``$XDG_CACHE_HOME/autopart/opencl``."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "autopart" / "opencl"


@cache
def _packaged_source(name: str) -> str:
    return (resources.files("autopart.targets.opencl") / "kernels" / f"{name}.cl").read_text(
        encoding="utf-8"
    )


def load_source(name: str) -> str:
    """The OpenCL C source ``kernels/<name>.cl`` (the seam tests patch to inject failures)."""
    return _packaged_source(name)


def first_error_line(message: str) -> str:
    """The most telling line of a build log: the first compiler error, else the first line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for line in lines:
        if re.search(r"\berror\b", line, re.IGNORECASE) and not line.startswith("clBuildProgram"):
            return re.sub(r"\S*?tempfile_\w+\.cl", "<source>", line)
    return lines[0] if lines else "unknown error"


def build(device: OpenCLDevice, source: str, op: str, node: str) -> Any:
    """Build ``source`` for every device of ``device``'s context, once; cached in memory.

    ``op`` and ``node`` only name the culprit when the build fails.
    """
    key = (source, BUILD_OPTIONS)
    program = device.programs.get(key)
    if program is not None:
        return program
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        cache: str | None = str(folder)
    except OSError:
        cache = None  # an unwritable cache costs build time, never correctness
    try:
        program = cl.Program(device.context, source).build(options=BUILD_OPTIONS, cache_dir=cache)
    except cl.Error as error:
        raise KernelBuildError(
            f"kernel for {op} (node {node}) failed to build on {device.name}: "
            f"{first_error_line(str(error))}"
        ) from None
    device.programs[key] = program
    return program


def program(device: OpenCLDevice, name: str, op: str, node: str, defines: str = "") -> Any:
    """The built program of ``kernels/<name>.cl``, after ``defines`` and ``common.cl``."""
    source = defines + load_source("common") + "\n" + load_source(name)
    return build(device, source, op, node)


def kernel(program: Any, name: str) -> Any:
    """A fresh kernel object: every launch site owns one, so argument state is not shared."""
    return cl.Kernel(program, name)
