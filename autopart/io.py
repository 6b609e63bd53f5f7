"""Reading and writing user files: atomic writes, safe ``.npz`` tensor files, checks."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import stat
import tempfile
import zipfile
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from autopart.errors import AutopartError, InputError, OutputError
from autopart.limits import check_fits, format_size

MAX_DOCUMENT_BYTES = 256 << 20  # a saved plan or profile larger than this is not one
PROBE_BYTES = 64 << 10  # what check_writable writes: a disk without this much room is full


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_target(path: str | Path) -> Path:
    """The file a write to ``path`` replaces: a symlink's target (followed), else ``path``.

    Writing through a link keeps the link, as ``open(path, "w")`` would, instead of putting
    a file in its place.
    """
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def read_only(path: Path) -> bool:
    """Whether the existing file ``path`` is read-only: no write bit set, or none for us.

    A file whose mode has no write bit was made read-only on purpose; it is refused even
    where root could write it.
    """
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) and (not mode & 0o222 or not os.access(path, os.W_OK))


def _failure(path: Path, failure: OSError) -> OutputError:
    """One line naming the file and what the file system said (a full disk, a permission)."""
    return OutputError(f"cannot write {path}: {failure.strerror or failure}")


def atomic_write_bytes(path: str | Path, data: bytes | memoryview) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new, never half.

    A symlink is written through (its target replaced, the link kept); a file replaced
    keeps its mode. Raises :class:`OutputError` naming the file for every failure of the
    file system (a full disk, a permission, a folder in the file's place) and for a
    read-only file (:func:`read_only`), which is never replaced.
    """
    path = write_target(path)
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a folder")
    if read_only(path):
        raise OutputError(f"cannot write {path}: it is read-only")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as failure:
        raise _failure(path, failure) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _mode_of(path))  # mkstemp makes 0600 files
        os.replace(tmp, path)
    except BaseException as failure:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(failure, OSError):
            raise _failure(path, failure) from None
        raise


TEMPORARY_NAME = "????????"  # the random part of the names tempfile.mkstemp makes


def leftovers(path: str | Path) -> list[Path]:
    """The temporary files that writes of ``path`` killed midway left beside it.

    :func:`atomic_write_bytes` writes ``.<name>.<random>.tmp`` beside the file it replaces
    and removes it on every failure it sees, but a process killed inside the write (SIGKILL,
    a power cut) leaves it behind. Nothing reads such a file. None are listed where
    ``path`` is a symlink, whose target may be written under another link's lock.
    """
    path = Path(path)
    if path.is_symlink():
        return []
    return sorted(path.parent.glob(f".{glob.escape(path.name)}.{TEMPORARY_NAME}.tmp"))


def remove_leftovers(path: str | Path) -> int:
    """Remove the :func:`leftovers` of ``path``; return how many were removed.

    Only for a caller that holds the lock of ``path`` (:func:`locked`) where every writer
    of ``path`` takes it: a temporary file is otherwise maybe another writer's, in use.
    """
    removed = 0
    for leftover in leftovers(path):
        with contextlib.suppress(OSError):
            leftover.unlink()
            removed += 1
    return removed


def _mode_of(path: Path) -> int:
    """The mode of the file ``path`` replaces, or the usual one for a new file."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o666 & ~_umask()


def lock_path(path: str | Path) -> Path:
    """The lock file that serialises writers of ``path``: ``.<name>.lock`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


@contextmanager
def locked(path: str | Path) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (:func:`lock_path`) within.

    Raises :class:`OutputError` naming the lock file when it cannot be opened (a folder in
    its place, a read-only file, a full disk).
    """
    lock = lock_path(path)
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a")  # noqa: SIM115 - closed below, after the lock is released
    except OSError as failure:
        raise OutputError(
            f"cannot open the lock file {lock}: {failure.strerror or failure}"
        ) from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_tensors(
    path: str | Path, expected: Collection[str] | None = None
) -> dict[str, np.ndarray]:
    """Load named arrays from an ``.npz`` file (never unpickling objects).

    Before any array is read, its name is checked against ``expected`` (when given: each
    must be there, and no other) and the sizes the archive declares are weighed against the
    memory available (:func:`autopart.limits.check_fits`), so a zip bomb or a misnamed file
    costs nothing. Every member is then checked against the CRC-32 the archive records for
    it, so a damaged or cut file is refused rather than read as other values. Raises
    :class:`InputError` for an unreadable or damaged file or a missing or unexpected name.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            names = [member.filename.removesuffix(".npy") for member in members]
            if expected is not None:
                _check_names(path, names, expected)
            declared = sum(_declared_nbytes(archive, member) for member in members)
    except FileNotFoundError:
        raise InputError(f"inputs file not found: {path}") from None
    except Exception as error:  # any failure to parse the user's file is theirs to fix
        raise InputError(f"cannot read {path} as an .npz file of arrays: {error}") from None
    check_fits(max(declared, sum(m.file_size for m in members)), f"the arrays in {path}")
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()  # np.load reads a member only as far as its header says
        if damaged is not None:
            raise ValueError(f"array {damaged!r} fails its CRC-32 check (the file is damaged)")
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except Exception as error:  # as above: the archive's members can be corrupt too
        raise InputError(f"cannot read {path} as an .npz file of arrays: {error}") from None


def _check_names(path: str | Path, names: Collection[str], expected: Collection[str]) -> None:
    """Raise :class:`InputError` unless ``names`` are exactly the ``expected`` ones.

    A name missing from an archive whose other names are right is an archive that lost a
    member (its directory is damaged), or one made without it.
    """
    unknown = sorted(set(names) - set(expected))
    missing = [name for name in expected if name not in names]
    if unknown:
        also = f"; missing input {', '.join(map(_printable, missing))}" if missing else ""
        raise InputError(
            f"{path} holds arrays the model has no input for: "
            f"{', '.join(map(_printable, unknown))}{also}"
        )
    if missing:
        raise InputError(f"{path} holds no array for input {', '.join(map(_printable, missing))}")


def _printable(name: str) -> str:
    """``name`` with control characters escaped, for a message of one line."""
    return repr(name)[1:-1]


def tensor_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """The shape of every array in an ``.npz`` file, from the headers alone (no data read).

    Raises :class:`InputError` as :func:`load_tensors` does for a file it cannot read.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            return {
                member.filename.removesuffix(".npy"): _header(archive, member)[0]
                for member in archive.infolist()
            }
    except FileNotFoundError:
        raise InputError(f"inputs file not found: {path}") from None
    except Exception as error:  # any failure to parse the user's file is theirs to fix
        raise InputError(f"cannot read {path} as an .npz file of arrays: {error}") from None


def _declared_nbytes(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> int:
    """The bytes the ``.npy`` header of ``member`` declares, read without its data."""
    shape, dtype = _header(archive, member)
    return int(np.prod(shape, dtype=np.float64)) * dtype.itemsize


def _header(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype the ``.npy`` header of ``member`` declares; ValueError for objects."""
    with archive.open(member) as handle:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
    if dtype.hasobject:
        raise ValueError(f"array {member.filename!r} holds Python objects")
    return tuple(shape), dtype


def save_tensors(path: str | Path, tensors: Mapping[str, np.ndarray]) -> None:
    """Save named arrays to an ``.npz`` file atomically."""
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **tensors)  # type: ignore[arg-type]
    atomic_write_bytes(path, buffer.getvalue())


def read_document(
    path: str | Path,
    what: str,
    error: type[AutopartError],
    max_bytes: int = MAX_DOCUMENT_BYTES,
    *,
    keep_undecodable: bool = False,
) -> str:
    """The UTF-8 text of a saved ``what`` (a plan, a profile), read at most ``max_bytes``.

    A missing, unreadable, oversized (a symlink to ``/dev/zero``, say) or non-UTF-8 file
    raises ``error`` with one line; nothing past the limit is read. With
    ``keep_undecodable``, bytes that are not UTF-8 are kept as lone surrogates instead, for
    formats that check each of their rows and drop the damaged ones.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except OSError as failure:
        raise error(f"{what} {path} cannot be read: {failure.strerror or failure}") from None
    if len(data) > max_bytes:
        raise error(f"{what} {path} is larger than {format_size(max_bytes)}: not a {what}")
    check_fits(len(data) * 8, f"{what} {path}")  # parsing takes several times the text
    try:
        return data.decode("utf-8", "surrogateescape" if keep_undecodable else "strict")
    except UnicodeDecodeError as failure:
        raise error(f"{what} {path} is not UTF-8 text: {failure.reason}") from None


def text_digest(text: str, size: int = 16) -> str:
    """The BLAKE2b digest of ``text`` in hex, ``size`` bytes long: what saved files check.

    Lone surrogates (undecodable bytes kept by :func:`read_document`) are hashed as they
    are, so they never match the digest of the text that was written.
    """
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=size).hexdigest()


def json_digest(document: object) -> str:
    """:func:`text_digest` of a JSON document's content: key order and spacing do not count.

    ``document`` must be what :func:`json.loads` gives (string keys, lists, no tuples), so
    that a document and the same document read back from its file have the same digest.
    """
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return text_digest(canonical)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(text: str, prefix: str, error: type[AutopartError]) -> object:
    """Parse ``text`` as strict JSON (no NaN or Infinity), or raise ``error(prefix + why)``.

    Documents nested too deeply for the parser and integers of more digits than Python
    converts are refused the same way, never raised as RecursionError or ValueError.
    """
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise error(f"{prefix}it is nested too deeply") from None
    except ValueError as failure:  # JSONDecodeError, too many digits, NaN
        raise error(f"{prefix}not valid JSON: {failure}") from None


def check_writable(
    path: str | Path, what: str, directory: bool = False, lock: bool = False
) -> None:
    """Raise :class:`OutputError` unless ``path`` can be written; leave nothing behind.

    ``path`` is a file (a symlink's target, as :func:`atomic_write_bytes` writes it), or
    with ``directory`` a folder. :data:`PROBE_BYTES` are written to a file in the nearest
    folder that exists and removed, so a read-only, full or pseudo file system (``/proc``)
    fails here, before long work, instead of at the end; an existing file must not be
    :func:`read_only`. With ``lock``, the file's lock file (:func:`lock_path`) must be
    openable too.
    """
    path = write_target(path)
    if path.exists() and path.is_dir() != directory:
        kind = "a folder" if path.is_dir() else "a file"
        raise OutputError(f"{what} {path} is {kind}")
    if not directory and read_only(path):
        raise OutputError(f"{what} {path} is read-only: make it writable, or write elsewhere")
    probe = path if directory else path.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(f"{what} {path} cannot be made: {probe} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=probe) as handle:
            handle.write(bytes(PROBE_BYTES))  # a full disk fails here, not after the work
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as failure:
        raise OutputError(
            f"{what} {path} cannot be written: {failure.strerror or failure}"
        ) from None
    if lock:
        _check_lock(lock_path(path), what)


def _check_lock(lock: Path, what: str) -> None:
    """Raise :class:`OutputError` when the existing lock file ``lock`` cannot be opened."""
    if not lock.exists() and not lock.is_symlink():
        return  # made when first needed, in a folder just found writable
    if lock.is_dir():
        raise OutputError(f"the lock file {lock} of the {what} is a folder: remove it")
    try:
        with open(lock, "a"):
            pass
    except OSError as failure:
        raise OutputError(
            f"the lock file {lock} of the {what} cannot be opened: {failure.strerror or failure}"
        ) from None
