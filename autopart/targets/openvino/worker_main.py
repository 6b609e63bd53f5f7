"""The worker's side of a compile with a deadline (:mod:`autopart.targets.openvino.worker`).

Run as ``python -m autopart.targets.openvino.worker_main FOLDER``: it compiles the model in
``FOLDER`` and writes the export beside it, then exits; the parent imports the export.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from autopart.io import atomic_write_bytes
from autopart.ir.weights import WeightsElsewhere
from autopart.targets.openvino import library
from autopart.targets.openvino.worker import BLOB, MODEL, REQUEST


def serve(folder: Path) -> None:
    """Compile ``folder``'s model under its request's properties; write the export atomically."""
    request = json.loads((folder / REQUEST).read_text())
    model_bytes = (folder / MODEL).read_bytes()
    if request.get("weights"):  # large weights are files there (ir.weights.WeightsElsewhere)
        model_bytes = WeightsElsewhere(model_bytes, Path(request["weights"]), 0)
    compiled = library.compile_onnx(model_bytes, request["config"], request["shapes"])
    atomic_write_bytes(folder / BLOB, compiled.export_model().getvalue())


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
