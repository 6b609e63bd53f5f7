"""OpenVINO compiling in a child process that can be stopped: a compile with a deadline.

OpenVINO's ``compile_model`` cannot be cancelled, and a thread left compiling would keep a
core busy under every timing that follows. So a compile with a deadline
(:mod:`autopart.targets.deadline`) runs in a child process (``python -m
autopart.targets.openvino.worker_main FOLDER``): it reads the model and the properties from
``FOLDER``, compiles, and writes the export (``CompiledModel.export_model``) back
atomically. The parent imports the export, which runs the same compiled graph; when the
deadline passes first, the child is killed and :class:`CompileTimeoutError` raised. Starting the
child costs about a second (Python and OpenVINO's import), so callers use it only for
models whose compile may be long.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from autopart.errors import TargetError
from autopart.ir.weights import WeightsElsewhere
from autopart.targets.deadline import CompileTimeoutError

MODEL, REQUEST, BLOB = "model.onnx", "request.json", "compiled.blob"  # in the folder


def compile_to_blob(
    model_bytes: bytes,
    config: Mapping[str, str],
    shapes: Mapping[str, Sequence[int]] | None,
    deadline_s: float,
) -> bytes:
    """``model_bytes`` compiled under ``config`` in a child process, exported, as bytes.

    Raises :class:`CompileTimeoutError` when the child has not finished in ``deadline_s``
    seconds (it is killed), :class:`TargetError` with its last line when it fails.
    """
    with tempfile.TemporaryDirectory(prefix="autopart-ovw-") as name:
        folder = Path(name)
        (folder / MODEL).write_bytes(model_bytes)
        fixed = {name: list(shape) for name, shape in (shapes or {}).items()}
        request: dict[str, object] = {"config": dict(config), "shapes": fixed}
        if isinstance(model_bytes, WeightsElsewhere):  # the child reads them where they are
            request["weights"] = str(model_bytes.folder)
        (folder / REQUEST).write_text(json.dumps(request))
        command = [sys.executable, "-m", "autopart.targets.openvino.worker_main", str(folder)]
        child = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            _, errors = child.communicate(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise CompileTimeoutError(
                f"openvino did not finish compiling within {deadline_s:.3g} s, so it was stopped"
            ) from None
        except BaseException:  # an interrupt: the child compiles for no one
            child.kill()
            raise
        blob = folder / BLOB
        if child.returncode != 0 or not blob.is_file():
            lines = errors.decode(errors="replace").strip().splitlines() or ["no message"]
            raise TargetError(f"openvino rejected the model: {lines[-1][:200]}")
        return blob.read_bytes()
