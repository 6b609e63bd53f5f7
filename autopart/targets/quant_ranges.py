"""int8 calibration: each tensor's range over calibration samples, measured once per model.

A model quantised to int8 maps every activation a quantised op reads onto 256 levels
between its smallest and largest value over the *calibration samples*. Those come from
the user (``--inputs`` holding several samples, see :func:`load_samples`), else from
seeded random inputs, which only stand in for real data (:attr:`CalibrationSamples.stand_in`).
The ranges are measured by onnxruntime's own MinMax calibrator on the whole model
(:func:`tensor_ranges`), never by hand, and cached in autopart's cache folder
(:func:`cache_dir`, never the model's) as JSON keyed by the model's graph hash and the
samples' digest, written atomically and checked when read back: a damaged file is
measured again, not trusted.

A graph carries its calibration in ``graph.meta`` (:func:`attach`); a graph without one
is calibrated on :data:`RANDOM_SAMPLES` seeded random samples.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from autopart.errors import InputError, TargetError
from autopart.io import atomic_write_bytes, load_tensors, text_digest
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.ir.hashing import graph_hash
from autopart.ir.onnx_export import to_onnx

META_KEY = "int8_calibration"
RANDOM_SAMPLES = 8  # seeded random calibration samples, as the quantize_static run
RANDOM_SEED = 1000  # far from the timing (seed) and evaluation (seed + 1..) samples
FORMAT = "autopart-int8-ranges/1"

Feeds = dict[str, np.ndarray]
Ranges = dict[str, tuple[float, float]]

# How many times ranges were measured in this process (not read from a cache): tests
# count calibrations with it, the library itself is never mocked.
calibrations = 0
_MEMO: dict[tuple[str, str], Ranges] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class CalibrationSamples:
    """The samples a model is calibrated on, their digest, and whether they are real.

    ``stand_in`` says the samples are seeded random inputs, not the user's data: the
    ranges, and so int8's error, are then only a stand-in for those of real inputs.
    """

    samples: tuple[Feeds, ...]
    stand_in: bool

    @property
    def digest(self) -> str:
        """A digest of every sample's names, dtypes, shapes and bytes, in order."""
        digest = hashlib.sha256()
        for sample in self.samples:
            for name in sorted(sample):
                array = np.ascontiguousarray(sample[name])
                digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
                digest.update(array.tobytes())
        return digest.hexdigest()[:32]


def random_calibration(graph: Graph, count: int = RANDOM_SAMPLES) -> CalibrationSamples:
    """``count`` seeded random samples of ``graph``'s inputs: a stand-in for real ones."""
    samples = tuple(random_inputs(graph, RANDOM_SEED + index) for index in range(count))
    return CalibrationSamples(samples, stand_in=True)


def attach(graph: Graph, calibration: CalibrationSamples | None) -> None:
    """Make ``calibration`` the one ``graph``'s int8 compiles use (None: random samples)."""
    if calibration is None:
        graph.meta.pop(META_KEY, None)
    else:
        graph.meta[META_KEY] = calibration


def calibration_of(graph: Graph) -> CalibrationSamples:
    """The calibration attached to ``graph``, else (and then attached) random samples."""
    found = graph.meta.get(META_KEY)
    if not isinstance(found, CalibrationSamples):
        found = random_calibration(graph)
        graph.meta[META_KEY] = found
    return found


def load_samples(path: str | Path, graph: Graph) -> list[Feeds]:
    """The samples in ``path``: an ``.npz``, or a folder of them (sorted by file name).

    An ``.npz`` whose arrays have the model's input shapes is one sample; one whose arrays
    all have one more, leading axis holds that many samples. Where every input's first
    dimension is 1, arrays of N along that axis instead (N images stacked, as a model of
    batch 1 reads them one at a time) are N samples too. Raises :class:`InputError` for
    a missing or empty folder, a file :func:`~autopart.io.load_tensors` refuses, or arrays
    whose shapes are none of these.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.npz"))
        if not files:
            raise InputError(f"the folder {path} holds no .npz file of inputs")
        return [sample for file in files for sample in load_samples(file, graph)]
    arrays = load_tensors(path, graph.inputs)
    shapes = {name: graph.value(name).shape for name in graph.inputs}
    if all(fits_shape(array.shape, shapes[name]) for name, array in arrays.items()):
        return [arrays]
    along_batch = _along_batch_of_one(arrays, shapes)
    if along_batch is not None:
        return along_batch
    counts = {array.shape[0] if array.ndim else -1 for array in arrays.values()}
    stacked = len(counts) == 1 and all(
        array.ndim and fits_shape(array.shape[1:], shapes[name]) for name, array in arrays.items()
    )
    if not stacked or counts == {0}:
        name, array = next(
            (n, a) for n, a in arrays.items() if not fits_shape(a.shape, shapes[n])
        )  # one exists: not every array fits, or the file would be one sample
        raise InputError(
            f"{path}: input {name!r} has shape {list(array.shape)}, expected "
            f"{list(shapes[name] or [])}: the arrays are neither one sample of the model's "
            "inputs nor several along one leading axis"
        )
    (count,) = counts
    return [{name: array[index] for name, array in arrays.items()} for index in range(count)]


def _along_batch_of_one(
    arrays: Mapping[str, np.ndarray], shapes: Mapping[str, Sequence[int | str | None] | None]
) -> list[Feeds] | None:
    """The samples of arrays stacked along a first dimension every input declares as 1.

    None unless every input declares a first dimension of 1 and its array has the same
    rank, the other dimensions fitting, and the same count N > 1 along the first.
    """
    counts = set()
    for name, array in arrays.items():
        declared = shapes[name]
        if not declared or declared[0] != 1 or array.ndim != len(declared):
            return None
        if not fits_shape(array.shape[1:], declared[1:]):
            return None
        counts.add(array.shape[0])
    if len(counts) != 1 or (count := counts.pop()) < 2:
        return None
    return [{n: a[i : i + 1] for n, a in arrays.items()} for i in range(count)]


def fits_shape(shape: Sequence[int], declared: Sequence[int | str | None] | None) -> bool:
    """Whether ``shape`` fits a declared shape (symbolic or unknown dimensions fit any)."""
    if declared is None:
        return True
    return len(shape) == len(declared) and all(
        not isinstance(want, int) or want == got for got, want in zip(shape, declared, strict=True)
    )


def cache_dir() -> Path:
    """``$AUTOPART_CACHE/int8``, else ``$XDG_CACHE_HOME/autopart/int8`` (``~/.cache``)."""
    root = os.environ.get("AUTOPART_CACHE")
    if root:
        return Path(root) / "int8"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "autopart" / "int8"


def ranges_path(graph: Graph, calibration: CalibrationSamples) -> Path:
    """The cache file of ``graph``'s ranges under ``calibration``."""
    return cache_dir() / f"ranges-{graph_hash(graph)[:32]}-{calibration.digest}.json"


def tensor_ranges(graph: Graph, calibration: CalibrationSamples | None = None) -> Ranges:
    """Each float tensor's (smallest, largest) value over the calibration samples.

    ``calibration`` None is :func:`calibration_of` the graph. Memoised per process, read
    from the cache file when it is intact and made for this graph and these samples, else
    measured (onnxruntime's MinMax calibrator) and written there atomically. A cache that
    cannot be written is no error: the ranges are measured again next time.
    """
    global calibrations
    calibration = calibration or calibration_of(graph)
    key = (graph_hash(graph), calibration.digest)
    with _LOCK:
        if key in _MEMO:
            return _MEMO[key]
        path = ranges_path(graph, calibration)
        ranges = _read_cached(path, key)
        if ranges is None:
            ranges = measure_ranges(graph, calibration.samples)
            calibrations += 1
            _write_cached(path, key, ranges)
        _MEMO[key] = ranges
    return ranges


def forget_memo() -> None:
    """Forget the ranges memoised in this process (the cache files stay)."""
    _MEMO.clear()


CALIBRATED = (np.dtype(np.float32), np.dtype(np.float16))  # as onnxruntime's MinMax calibrator
REDUCTIONS = ("ReduceMin", "ReduceMax")


def measure_ranges(graph: Graph, samples: Sequence[Mapping[str, np.ndarray]]) -> Ranges:
    """The ranges of every float tensor of ``graph`` over ``samples``, by onnxruntime.

    The tensors onnxruntime's MinMax calibrator would calibrate (the float32 and float16
    inputs and outputs of the model's nodes, initializers left out) each get a ReduceMin
    and a ReduceMax appended as extra graph outputs, and onnxruntime runs the model once per
    sample. Built here in one linear pass: the calibrator's own ``augment_graph`` searches
    the node list and rebuilds the value infos for every tensor, quadratic in the graph
    (over 7 minutes on a 12,400-node transformer stack). Raises :class:`TargetError` with
    onnxruntime's first line when it cannot.
    """
    import onnxruntime as ort

    if not samples:
        raise TargetError("int8 calibration needs at least one sample")
    model = to_onnx(graph)
    names = _calibrated(model, graph)
    for name in names:
        for op in REDUCTIONS:
            out = f"{name}_autopart_{op}"
            model.graph.node.append(onnx.helper.make_node(op, [name], [out], keepdims=1))
            model.graph.output.append(
                onnx.helper.make_tensor_value_info(out, _elem(graph, name), None)
            )
    lows: dict[str, float] = {}
    highs: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="autopart-int8-") as folder:
            source = Path(folder) / "augmented.onnx"
            onnx.save(model, source)
            options = ort.SessionOptions()
            options.log_severity_level = 3  # errors only: a data-dependent shape warns per run
            session = ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
            wanted = [
                f"{name}_autopart_{op}" for name in names for op in ("ReduceMin", "ReduceMax")
            ]
            for sample in samples:
                feeds = {name: np.asarray(value) for name, value in sample.items()}
                found = session.run(wanted, feeds)
                for index, name in enumerate(names):
                    low, high = float(np.min(found[2 * index])), float(np.max(found[2 * index + 1]))
                    lows[name] = min(low, lows.get(name, low))
                    highs[name] = max(high, highs.get(name, high))
    except Exception as error:  # onnxruntime's errors are of many types
        line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TargetError(f"int8 calibration failed: {line}") from None
    return {name: (lows[name], highs[name]) for name in names}


def _calibrated(model: onnx.ModelProto, graph: Graph) -> list[str]:
    """The tensors to calibrate, in node order: float node inputs and outputs, no constants."""
    constants = {initializer.name for initializer in model.graph.initializer}
    seen: set[str] = set()
    names: list[str] = []
    for node in model.graph.node:
        for name in (*node.input, *node.output):
            if not name or name in seen or name in constants or name not in graph.values:
                continue
            seen.add(name)
            if graph.values[name].dtype in CALIBRATED and not graph.values[name].is_const:
                names.append(name)
    return names


def _elem(graph: Graph, name: str) -> int:
    """The ONNX element type of ``name``'s float dtype."""
    dtype = graph.values[name].dtype
    return onnx.helper.np_dtype_to_tensor_dtype(
        dtype if dtype is not None else np.dtype(np.float32)
    )


def _read_cached(path: Path, key: tuple[str, str]) -> Ranges | None:
    """The ranges in ``path`` when its digest checks and it is for ``key``, else None."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        body = document["ranges"]
        intact = document["digest"] == text_digest(json.dumps(body, sort_keys=True))
        if not intact or document["format"] != FORMAT or tuple(document["key"]) != key:
            return None
        return {str(name): (float(low), float(high)) for name, (low, high) in body.items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cached(path: Path, key: tuple[str, str], ranges: Ranges) -> None:
    """Write ``ranges`` to ``path`` atomically with their digest; quietly skip on failure."""
    body = {name: [low, high] for name, (low, high) in ranges.items()}
    document = {
        "format": FORMAT,
        "key": list(key),
        "digest": text_digest(json.dumps(body, sort_keys=True)),
        "ranges": body,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, json.dumps(document).encode("utf-8"))
    except Exception:  # an unwritable cache only costs a recalibration
        return
