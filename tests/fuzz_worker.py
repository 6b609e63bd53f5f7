"""A worker process that runs ``autopart`` commands on fuzzed files, one case per line.

It reads JSON lines ``{"args": [...], "files": {name: base64}}`` on stdin, writes the files
into a fresh folder (``{dir}`` in the arguments names it), runs the command in-process and
answers ``{"code": int, "output": str, "crash": str | null}`` on stdout. Before the first
case it caps its address space at what it uses then plus :data:`HEADROOM` (so a command that
allocates more than that fails here instead of eating the machine) and every case runs
under an alarm of :data:`CASE_SECONDS` (a hang is reported as a crash).
"""

from __future__ import annotations

import base64
import json
import resource
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from types import FrameType

from click.testing import CliRunner

from autopart.cli import main

HEADROOM = 2 << 30
CASE_SECONDS = 30


class Hang(BaseException):
    """A case ran longer than :data:`CASE_SECONDS`."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang(f"no answer within {CASE_SECONDS} s")


def _cap_address_space() -> None:
    with open("/proc/self/status", encoding="ascii") as handle:
        size = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (size + HEADROOM, resource.RLIM_INFINITY))


def run_case(case: dict[str, object], folder: Path) -> dict[str, object]:
    """Run one case in ``folder``; never raises."""
    files = case.get("files", {})
    assert isinstance(files, dict)
    for name, data in files.items():
        (folder / name).write_bytes(base64.b64decode(str(data)))
    args = [str(arg).replace("{dir}", str(folder)) for arg in case["args"]]  # type: ignore[attr-defined]
    signal.alarm(CASE_SECONDS)
    try:
        result = CliRunner().invoke(main, args, catch_exceptions=True)
        crash = None
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            crash = "".join(traceback.format_exception(result.exception))[-3000:]
        return {"code": result.exit_code, "output": result.output[-3000:], "crash": crash}
    except Hang as hang:
        return {"code": -1, "output": "", "crash": f"hang: {hang}"}
    finally:
        signal.alarm(0)


def _warm_up() -> None:
    """Load every library a case may load (onnxruntime, OpenCL...) before the cap."""
    from onnx import TensorProto, helper, save

    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    graph = helper.make_graph(
        [node],
        "warm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "warm.onnx")
        save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        CliRunner().invoke(main, ["devices"])
        for target in ("cpu@numpy", "cpu@onnxruntime", "opencl:0@opencl"):
            CliRunner().invoke(main, ["run", path, "--repeat", "1", "--fallback", target])


def main_loop() -> None:
    """Answer cases until stdin closes."""
    signal.signal(signal.SIGALRM, _alarm)
    _warm_up()
    _cap_address_space()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        with tempfile.TemporaryDirectory(prefix="autopart-fuzz-") as folder:
            answer = run_case(json.loads(line), Path(folder))
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main_loop()
