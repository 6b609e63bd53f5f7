"""The worker's side of a compile with a deadline (:mod:`autopart.targets.openvino.worker`).

Run as ``python -m autopart.targets.openvino.worker_main FOLDER``: it compiles the model in
``FOLDER`` and writes the export beside it, then exits; the parent imports the export.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from autopart.targets.openvino import library
from autopart.targets.openvino.worker import BLOB, MODEL, REQUEST


def serve(folder: Path) -> None:
    """Compile ``folder``'s model under its request's properties; write the export atomically."""
    request = json.loads((folder / REQUEST).read_text())
    model = library.read_onnx((folder / MODEL).read_bytes())
    if request["shapes"]:
        library.reshape_dynamic(model, request["shapes"])
    compiled = library.core().compile_model(model, library.DEVICE, request["config"])
    partial = folder / (BLOB + ".part")
    partial.write_bytes(compiled.export_model().getvalue())
    os.replace(partial, folder / BLOB)


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
