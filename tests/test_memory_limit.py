"""``--memory-limit``: every size guard weighs against it, and every command reports its peak."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from autopart.errors import ResourceError
from autopart.host_memory import peak_memory_bytes
from autopart.limits import available_memory_bytes, check_fits, memory_limit
from tests.test_errors import assert_one_line_error, invoke
from tests.test_profile import tiny_cnn

MIB = 1 << 20


def resident() -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmRSS:"))


def test_within_a_limit_a_guard_refuses_what_would_pass_it() -> None:
    check_fits(64 * MIB, "a buffer")  # the machine has it
    with memory_limit(resident() + 16 * MIB):
        assert available_memory_bytes() <= 16 * MIB + 8 * MIB  # what the process grew since
        with pytest.raises(ResourceError, match=r"a buffer needs 64\.0 MiB"):
            check_fits(64 * MIB, "a buffer")
    check_fits(64 * MIB, "a buffer")  # the limit is lifted on leaving


def test_limits_nest_and_restore() -> None:
    with memory_limit(resident() + 512 * MIB):
        with memory_limit(1):
            assert available_memory_bytes() == 0
        assert available_memory_bytes() > 256 * MIB


def test_the_peak_is_at_least_what_the_process_holds() -> None:
    assert peak_memory_bytes() >= resident() > 0


@pytest.mark.parametrize("command", ["tune", "bench"])
def test_a_malformed_limit_is_one_error_line(command: str) -> None:
    assert_one_line_error(*invoke(command, "squeezenet", "--memory-limit", "1.5XB"), "1.5XB")


def test_a_tune_under_a_tiny_limit_stops_with_one_line(tmp_path: Path) -> None:
    model = tmp_path / "tiny_cnn.onnx"
    onnx.save(tiny_cnn(), model)
    code, output = invoke(
        "tune", str(model), "--targets", "cpu@numpy", "--no-peers", "--rounds", "2",
        "--profiles", str(tmp_path / "profiles"), "--search-dir", str(tmp_path / "search"),
        "--memory-limit", "1MB",
    )  # fmt: skip
    assert_one_line_error(code, output, "of memory available")


_FILL = """
import time
import numpy as np
from autopart.host_memory import status_bytes
from autopart.limits import memory_limit, memory_watch

held = []
with memory_limit(status_bytes("VmRSS") + (200 << 20)), memory_watch(lambda: "filling a buffer"):
    for _ in range(40):  # 2 GiB at most, in 50 MiB steps, each touched
        held.append(np.ones(50 << 18, np.float32))
        time.sleep(0.05)
print("not stopped")
"""


def test_the_memory_watch_stops_a_growing_process_with_one_line_before_its_limit() -> None:
    """What no size guard foresees (a library compiling a model grew one tune to 24 GB and
    the kernel killed it): the watch stops the process at its limit, with one line."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FILL], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert "not stopped" not in done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: out of memory while filling a buffer")
    assert "over its --memory-limit" in lines[0]
