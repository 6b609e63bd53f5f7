"""A graph's weights, hashed once and written once to files that exports refer to.

A library that reads a model from memory parses a copy of every weight out of the
serialised bytes, beside the bytes and the graph's own arrays: OpenVINO reading vgg19's
548 MB from memory peaked at 1.84 GiB over what it kept, and took 2.0 s. Read from a
file whose weights are external data, it maps them instead: 0.06 s and nothing extra
resident until compiling copies them. :class:`WeightFiles` writes each large constant
once per process, named by its digest, so that every export of it refers to the same
file; the folder is removed at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from autopart.errors import OutputError
from autopart.io import atomic_write_bytes
from autopart.ir.graph import Graph, Node
from autopart.ir.memo import graph_memo
from autopart.ir.onnx_export import to_onnx


class WeightsElsewhere(bytes):
    """Serialised ONNX whose large weights are files in ``folder`` (ONNX external data).

    Hashed, compared and sent as the bytes they are; a library reads them from a file
    written in ``folder`` (:meth:`path`), and maps the weights.
    """

    folder: Path
    weight_bytes: int  # how many bytes of weights it refers to

    def __new__(cls, data: bytes, folder: Path, weight_bytes: int) -> WeightsElsewhere:
        """``data`` referring to ``weight_bytes`` of weights in files in ``folder``."""
        made = super().__new__(cls, data)
        made.folder, made.weight_bytes = folder, weight_bytes
        return made

    def path(self) -> Path:
        """A file of this model in :attr:`folder`, written once (its weights beside it).

        Raises :class:`~autopart.errors.OutputError` when it cannot be written.
        """
        path = self.folder / f"{hashlib.sha256(self).hexdigest()[:32]}.onnx"
        if not path.is_file():
            atomic_write_bytes(path, self)
        return path


def model_size(model_bytes: bytes) -> int:
    """The bytes of a serialised model and of the weights it refers to elsewhere."""
    elsewhere = model_bytes.weight_bytes if isinstance(model_bytes, WeightsElsewhere) else 0
    return len(model_bytes) + elsewhere


# A model whose constants total this much keeps its weights of TENSOR_BYTES or more apart
# (vgg19, 548 MB: OpenVINO read it in 0.06 s from files against 2.0 s and 1.84 GiB extra
# from memory); smaller ones gain little, and every compile would write a file.
MODEL_BYTES = 64 << 20
TENSOR_BYTES = 1 << 20


def weight_digest(graph: Graph, name: str) -> bytes:
    """The SHA-256 of constant ``name``'s bytes, hashed in place once per graph and array."""
    data = graph.value(name).const
    assert data is not None
    memo = graph_memo(graph)
    known = memo.get(("weight digest", name))
    if known is None or known[0] is not data:
        if data.dtype.hasobject:  # strings: their serialised tensor is their bytes
            hashed = hashlib.sha256(numpy_helper.from_array(data).SerializeToString())
        else:  # in place; a copy only where the array is a view
            hashed = hashlib.sha256(_flat_bytes(data))
        known = (data, hashed.digest())
        memo[("weight digest", name)] = known
    digest: bytes = known[1]
    return digest


def export_digest(
    graph: Graph, nodes: Sequence[Node], inputs: Sequence[str], outputs: Sequence[str]
) -> str:
    """The hex SHA-256 of what ``to_onnx(graph, nodes, inputs, outputs)`` holds, unmade.

    The export with every weight declared as a typed input instead (cheap, however large
    the weights), then each weight's own digest (:func:`weight_digest`) in the order it is
    declared: two exports digest alike exactly when their nodes, boundary and weights are
    alike. For a cache keyed by a large export without making it (vgg19's: 0.55 GiB, and
    as much again serialised to be hashed).
    """
    model = to_onnx(graph, list(nodes), list(inputs), list(outputs), embed_constants=0)
    hashed = hashlib.sha256(model.SerializeToString())
    for declared in model.graph.input[len(inputs) :]:
        hashed.update(weight_digest(graph, declared.name))
    return hashed.hexdigest()


def _flat_bytes(data: np.ndarray) -> np.ndarray:
    """``data``'s bytes as one flat uint8 array, in place unless it is a view (then copied)."""
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8)


class WeightFiles:
    """Large constants written to one folder of this process, each once, by digest.

    :meth:`tensor` gives the TensorProto that refers to a constant's file (ONNX external
    data, its location relative to :attr:`folder`), writing the file the first time; a
    model that refers to them must be read from a file in :attr:`folder`. Files are
    written atomically and never rewritten (a library may still map one); the folder is
    made on first use and removed at exit. Thread-safe.
    """

    def __init__(self) -> None:
        self._folder: Path | None = None
        self._written: set[str] = set()
        self._lock = threading.Lock()

    @property
    def folder(self) -> Path:
        """The folder of the files (made on first use, removed at exit)."""
        with self._lock:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="autopart-weights-"))
                atexit.register(shutil.rmtree, self._folder, ignore_errors=True)
            return self._folder

    def tensor(self, graph: Graph, name: str) -> onnx.TensorProto:
        """Constant ``name`` of ``graph`` as external data in its file (written if new).

        Raises :class:`~autopart.errors.OutputError` when the file cannot be written.
        """
        data = graph.value(name).const
        assert data is not None and not data.dtype.hasobject
        location = f"{weight_digest(graph, name).hex()[:40]}.bin"
        self._write(location, memoryview(_flat_bytes(data)))
        tensor = onnx.TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(data.dtype))
        tensor.dims.extend(data.shape)
        _refer(tensor, location, data.nbytes)
        return tensor

    def move_out(self, tensors: Sequence[onnx.TensorProto]) -> None:
        """Move each of ``tensors``' raw data to its file (written if new), in place.

        Every file is written before any tensor changes: raises
        :class:`~autopart.errors.OutputError` when one cannot be, with ``tensors`` as they were.
        """
        placed = []
        for tensor in tensors:
            raw = tensor.raw_data  # each read of the field is a copy: read once
            placed.append((f"{hashlib.sha256(raw).hexdigest()[:40]}.bin", len(raw)))
            self._write(placed[-1][0], raw)
            del raw
        for tensor, (location, length) in zip(tensors, placed, strict=True):
            tensor.ClearField("raw_data")
            _refer(tensor, location, length)

    def _write(self, location: str, data: bytes | memoryview) -> None:
        """Write ``data`` as ``location`` in the folder, unless this process wrote it before."""
        folder = self.folder
        with self._lock:
            if location not in self._written:
                atomic_write_bytes(folder / location, data)
                self._written.add(location)


def _refer(tensor: onnx.TensorProto, location: str, length: int) -> None:
    """Make ``tensor`` external data: ``length`` bytes of file ``location`` from its start."""
    tensor.data_location = onnx.TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", "0"), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


WEIGHT_FILES = WeightFiles()


def raw_size(tensor: onnx.TensorProto) -> int:
    """The bytes of ``tensor``'s raw data, from its type and dims (0 without raw data).

    Reading ``raw_data`` itself copies the bytes out of the message: a 392 MB weight took
    0.29 s each time.
    """
    if not tensor.HasField("raw_data"):
        return 0
    itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return int(np.prod(tensor.dims, dtype=np.int64)) * itemsize


def weights_apart(model: onnx.ModelProto, files: WeightFiles | None = None) -> int:
    """Move ``model``'s large initializers' raw data to ``files`` in place, if it is large.

    Only a model of :data:`MODEL_BYTES` or more of raw initializers moves those of
    :data:`TENSOR_BYTES` or more (:data:`WEIGHT_FILES` by default); the bytes moved.
    Raises :class:`~autopart.errors.OutputError` when a file cannot be written (then
    ``model`` is unchanged).
    """
    sizes = [(tensor, raw_size(tensor)) for tensor in model.graph.initializer]
    if sum(size for _, size in sizes) < MODEL_BYTES:
        return 0
    large = [tensor for tensor, size in sizes if size >= TENSOR_BYTES]
    moved = sum(size for _, size in sizes if size >= TENSOR_BYTES)
    (files or WEIGHT_FILES).move_out(large)
    return moved


def serialised_apart(model: onnx.ModelProto) -> bytes:
    """``model`` serialised, its large weights moved to files first (:func:`weights_apart`).

    ``model`` must be the caller's own: its tensors are changed in place. Where the files
    cannot be written, or the model is small, it is serialised whole.
    """
    moved = 0
    with contextlib.suppress(OutputError):  # a full disk: the weights stay in the bytes
        moved = weights_apart(model)
    made = model.SerializeToString()
    return WeightsElsewhere(made, WEIGHT_FILES.folder, moved) if moved else made


def exported_bytes(
    graph: Graph, nodes: Sequence[Node], feeds: Sequence[str], results: Sequence[str]
) -> bytes:
    """``nodes`` exported as a model of ``feeds`` to ``results``, serialised.

    An export of :data:`MODEL_BYTES` of constants or more refers to those of
    :data:`TENSOR_BYTES` or more as files of :data:`WEIGHT_FILES`
    (:class:`WeightsElsewhere`), unless they cannot be written: then they are embedded.
    """
    names = {name for node in nodes for name in node.present_inputs}
    values = (graph.value(name).const for name in names)
    constants = sum(value.nbytes for value in values if value is not None)
    if constants >= MODEL_BYTES:
        with contextlib.suppress(OutputError):
            external = functools.partial(_weight_file, graph)
            exported = to_onnx(graph, nodes, feeds, results, external=external)
            return WeightsElsewhere(exported.SerializeToString(), WEIGHT_FILES.folder, constants)
    return to_onnx(graph, nodes, feeds, results).SerializeToString()


def _weight_file(graph: Graph, name: str) -> onnx.TensorProto | None:
    """Constant ``name`` as external data in its file, if large and numeric (else None)."""
    data = graph.value(name).const
    if data is None or data.dtype.hasobject or data.nbytes < TENSOR_BYTES:
        return None
    return WEIGHT_FILES.tensor(graph, name)
