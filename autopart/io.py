"""Reading and writing user files: atomic writes and safe ``.npz`` tensor files."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from autopart.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_tensors(path: str | Path) -> dict[str, np.ndarray]:
    """Load named arrays from an ``.npz`` file (never unpickling objects)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise InputError(f"inputs file not found: {path}") from None
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read {path} as an .npz file of arrays: {error}") from None


def save_tensors(path: str | Path, tensors: Mapping[str, np.ndarray]) -> None:
    """Save named arrays to an ``.npz`` file atomically."""
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **tensors)  # type: ignore[arg-type]
    atomic_write_bytes(path, buffer.getvalue())
