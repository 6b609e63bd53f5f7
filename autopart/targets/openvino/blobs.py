"""Slow compiles kept on disk for the process: a large model is compiled once per run.

OpenVINO compiles a large model in seconds to minutes (a 12,400-node transformer stack:
16 s on 2 cores), and a tune compiles the same whole model for the screen, its peers and
the race, freeing it in between to bound memory. A compile that took at least
:data:`MIN_COMPILE_S` is exported (``CompiledModel.export_model``) to a file in a temporary
folder of this process, keyed as the in-memory cache keys it; the next compile of that key
imports the file instead (3.6 s for that stack), and the imported model runs the same
compiled graph. An import that took longer than the compile it stands in for marks the key
to be compiled from then on (resnet50's 0.4 s compile imports in 0.5 s). Exporting costs a
small share of a compile, and importing a larger one, so a compile of a second or so is
worth keeping too (SSDLite's detector: a 1.1-1.3 s compile, a 0.07 s export, a 0.3 s
import; its two peers are compiled in the screen and again for the race). Files are written
atomically, read back only by this process, and kept within :data:`MAX_BYTES` (the oldest
removed first); the folder is removed at exit. The library keeps no export of a model whose
large weights are files (:mod:`autopart.ir.weights`): compiled from them, OpenVINO holds
one copy of the weights of its own; imported, two (vgg19 in f32: 0.57 against 1.10 GiB).
"""

from __future__ import annotations

import atexit
import hashlib
import io
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autopart.errors import OutputError
from autopart.io import atomic_write_bytes

MIN_COMPILE_S = 0.5  # shorter compiles are not worth a file: their import saves little
MAX_BYTES = 4 << 30


@dataclass
class _Blob:
    """One exported model: its file, size, digest, and how long compiling it took."""

    path: Path
    size: int
    digest: str
    compile_s: float


class BlobStore:
    """Exported compiled models of one process, by key, within ``max_bytes`` on disk.

    :meth:`compile` returns a compiled model for a key, importing the exported file where
    one is kept and worth it, else compiling (and exporting when the compile was slow).
    Thread-safe: one compile or import runs at a time per store.
    """

    def __init__(self, max_bytes: int = MAX_BYTES, min_compile_s: float = MIN_COMPILE_S) -> None:
        self.max_bytes, self.min_compile_s = max_bytes, min_compile_s
        self._blobs: OrderedDict[str, _Blob] = OrderedDict()
        self._compile_instead: set[str] = set()
        self._folder: Path | None = None
        self._lock = threading.Lock()
        self.imports = 0

    def compile(
        self,
        key: str,
        compile_model: Callable[[], Any],
        import_model: Callable[[io.BytesIO], Any],
        export_elsewhere: Callable[[], bytes] | None = None,
        keep: bool = True,
    ) -> Any:
        """The compiled model of ``key``: imported from its file if kept, else compiled.

        ``compile_model()`` compiles it; ``import_model(stream)`` imports an exported one.
        With ``export_elsewhere``, a model not kept is compiled by that instead (a child
        process that can be stopped), which returns the export; it is kept and imported.
        A file that fails its digest or its import is dropped and the model compiled.
        Without ``keep``, nothing is exported or kept for ``key``: each call compiles (or
        imports what ``export_elsewhere`` returns), for a model whose import would hold
        more memory than its compile does.
        """
        with self._lock:
            blob = self._blobs.get(key) if keep else None
            if blob is not None and key not in self._compile_instead:
                imported = self._import(key, blob, import_model)
                if imported is not None:
                    return imported
            started = time.perf_counter()
            if export_elsewhere is not None:
                data = export_elsewhere()
                if keep:
                    self._keep(key, data, time.perf_counter() - started)
                return import_model(io.BytesIO(data))
            compiled = compile_model()
            took = time.perf_counter() - started
            known = key in self._blobs or key in self._compile_instead
            if keep and took >= self.min_compile_s and not known:
                self._export(key, compiled, took)
            return compiled

    def _import(self, key: str, blob: _Blob, import_model: Callable[[io.BytesIO], Any]) -> Any:
        """``blob`` imported, or None (its file changed or OpenVINO refused it: dropped)."""
        started = time.perf_counter()
        try:
            data = blob.path.read_bytes()
            if hashlib.sha256(data).hexdigest() != blob.digest:
                raise ValueError("the file changed")
            imported = import_model(io.BytesIO(data))
        except Exception:  # any failure: compile instead, as without the file
            self._drop(key)
            return None
        if time.perf_counter() - started > blob.compile_s:
            self._compile_instead.add(key)
            self._drop(key)
        else:
            self._blobs.move_to_end(key)
        self.imports += 1
        return imported

    def _export(self, key: str, compiled: Any, compile_s: float) -> None:
        """Write ``compiled`` to the store's folder atomically; nothing if export fails."""
        try:
            stream = compiled.export_model()
        except Exception:  # a plugin that cannot export: the model is compiled each time
            return
        with stream.getbuffer() as data:  # not copied out: a blob is as large as the weights
            self._keep(key, data, compile_s)

    def _keep(self, key: str, data: bytes | memoryview, compile_s: float) -> None:
        """Keep the export ``data`` of ``key`` (written atomically) within the byte cap."""
        if len(data) > self.max_bytes:
            return
        path = self._ensure_folder() / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.blob"
        try:
            atomic_write_bytes(path, data)
        except OutputError:  # a full disk: the model is compiled again next time
            return
        self._blobs[key] = _Blob(path, len(data), hashlib.sha256(data).hexdigest(), compile_s)
        while sum(b.size for b in self._blobs.values()) > self.max_bytes:
            self._drop(next(iter(self._blobs)))

    def _drop(self, key: str) -> None:
        blob = self._blobs.pop(key, None)
        if blob is not None:
            blob.path.unlink(missing_ok=True)

    def _ensure_folder(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="autopart-ov-"))
            atexit.register(shutil.rmtree, self._folder, True)
        return self._folder

    def clear(self) -> None:
        """Forget every kept file and remove them."""
        with self._lock:
            for key in list(self._blobs):
                self._drop(key)
            self._compile_instead.clear()
