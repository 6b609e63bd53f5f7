"""Bundled models: the real network graphs shipped inside the onnx package, with weights.

The graphs under ``onnx/backend/test/data/light`` fill every weight with one constant
(ConstantOfShape of 0.02), which makes their outputs degenerate. :func:`load_zoo_model`
materialises them with seeded random weights chosen by each parameter's role (He-normal
convolution and dense weights, near-identity normalisation), then rescales every Conv and
Gemm weight so that its output has unit standard deviation on a random input (LSUV
initialisation), which keeps activations finite and meaningful through deep networks.
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from autopart.errors import ModelError, OutputError
from autopart.io import atomic_write_bytes
from autopart.ir.onnx_import import attribute_value, read_model
from autopart.ops import bind

_FILES = {
    "alexnet": "light_bvlc_alexnet.onnx",
    "densenet121": "light_densenet121.onnx",
    "inception_v1": "light_inception_v1.onnx",
    "inception_v2": "light_inception_v2.onnx",
    "resnet50": "light_resnet50.onnx",
    "shufflenet": "light_shufflenet.onnx",
    "squeezenet": "light_squeezenet.onnx",
    "vgg19": "light_vgg19.onnx",
    "zfnet512": "light_zfnet512.onnx",
}
_LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

Initialiser = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


def zoo_names() -> list[str]:
    """Names of the bundled models."""
    return sorted(_FILES)


def _he(fan_in: int) -> Initialiser:
    return lambda rng, shape: (
        rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / max(fan_in, 1)))
    )


def _uniform(low: float, high: float) -> Initialiser:
    return lambda rng, shape: rng.uniform(low, high, shape).astype(np.float32)


def _normal(std: float) -> Initialiser:
    return lambda rng, shape: rng.standard_normal(shape, dtype=np.float32) * np.float32(std)


_RESHAPING = frozenset({"Unsqueeze", "Reshape", "Squeeze", "Flatten"})


def _role(graph: onnx.GraphProto, name: str, shape: tuple[int, ...]) -> Initialiser | None:
    """How to initialise parameter ``name``, judged by the op and input slot that use it."""
    for node in graph.node:
        for slot, used in enumerate(node.input):
            if used != name:
                continue
            op = node.op_type
            if op in _RESHAPING and slot == 0:  # e.g. a per-channel scale reshaped before Mul
                return _role(graph, node.output[0], shape)
            if op in ("Conv", "ConvTranspose") and slot == 1:
                return _he(int(np.prod(shape[1:])))
            if op == "Gemm" and slot == 1:
                return _he(int(np.prod(shape)) // max(_gemm_units(node, shape), 1))
            if op in ("Conv", "ConvTranspose", "Gemm") and slot == 2:
                return _normal(0.01)
            if op == "BatchNormalization":
                return [None, _uniform(0.8, 1.2), _normal(0.1), _normal(0.1), _uniform(0.5, 1.5)][
                    slot
                ]
            if op == "Mul":
                return _uniform(0.8, 1.2)
            if op in ("Add", "Sum"):
                return _normal(0.1)
    return None


def _gemm_units(node: onnx.NodeProto, shape: tuple[int, ...]) -> int:
    trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
    return shape[0] if trans_b and len(shape) == 2 else shape[-1]


def _materialise(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    graph = model.graph
    initializers = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    params: dict[str, np.ndarray] = {}
    kept_nodes = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in initializers:
            shape = tuple(int(d) for d in initializers[node.input[0]])
            init = _role(graph, node.output[0], shape)
            if init is not None:
                params[node.output[0]] = init(rng, shape)
                continue
        kept_nodes.append(node)
    for name, data in initializers.items():
        if data.dtype == np.float32 and name not in params:
            init = _role(graph, name, tuple(data.shape))
            if init is not None:
                params[name] = init(rng, tuple(data.shape))
    used = {name for node in kept_nodes for name in node.input}
    constants = {n: d for n, d in initializers.items() if n in used and n not in params}
    constants.update(params)
    made = set(params)
    real_inputs = [i for i in graph.input if i.name not in initializers]
    del params, initializers  # each weight is held once: by ``constants``, till it is stored
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    _normalise_layers(kept_nodes, real_inputs, constants, made, opset, rng)
    new_graph = helper.make_graph(kept_nodes, graph.name, real_inputs, list(graph.output))
    for name in list(constants):  # one weight at a time: none is held twice over
        new_graph.initializer.add().CopyFrom(numpy_helper.from_array(constants.pop(name), name))
    materialised = helper.make_model(new_graph, opset_imports=list(model.opset_import))
    materialised.ir_version = max(model.ir_version, 4)
    return materialised


def _normalise_layers(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    constants: dict[str, np.ndarray],
    params: set[str],
    opset: int,
    rng: np.random.Generator,
) -> None:
    """LSUV: scale each Conv/Gemm's random weight and bias so its output has unit std.

    Runs the (topologically ordered) ONNX nodes with the reference kernels on a random
    input, rescaling ``constants`` in place as it goes.
    """
    env = dict(constants)
    for info in inputs:
        dims = [d.dim_value or 1 for d in info.type.tensor_type.shape.dim]
        env[info.name] = rng.standard_normal(dims, dtype=np.float32)
    origin = {name: name for name in params}  # value -> the parameter it is a reshape of
    for node in nodes:
        attrs = {a.name: attribute_value(a) for a in node.attribute}
        kernel = bind(node.op_type, node.domain, opset, attrs, len(node.output))
        args = [env[name] if name else None for name in node.input]
        outputs = kernel(*args)
        if node.op_type in _RESHAPING and node.input[0] in origin:
            origin[node.output[0]] = origin[node.input[0]]
        if node.op_type in ("Conv", "Gemm") and node.input[1] in origin:
            std = float(outputs[0].std())
            if std > 0:
                for name in node.input[1:3]:
                    if name in origin:
                        source = origin[name]
                        constants[source] = constants[source] / np.float32(std)
                        env[source] = constants[source]
                        if name != source:
                            env[name] = env[name] / np.float32(std)
                args = [env[name] if name else None for name in node.input]
                outputs = kernel(*args)
        for name, data in zip(node.output, outputs, strict=False):
            if name:
                env[name] = data


def load_zoo_model(name: str, seed: int = 0) -> onnx.ModelProto:
    """The bundled model ``name`` with seeded random weights, as a new ONNX ModelProto.

    The weights are made once per process and the model kept in a file of the process's
    own (:func:`_kept`, removed at exit), not in memory: a tune asks for its model as
    shipped 17 times (its peers and whole-model plans), and making resnet50's took 0.5 s
    and 0.4 GiB each time; reading the file back takes 0.1 s, its digest checked.
    """
    if name not in _FILES:
        raise ModelError(f"unknown zoo model {name!r}; available: {', '.join(zoo_names())}")
    kept = _kept(name, seed)
    if kept is not None:
        return kept
    model = _materialise(read_model(_LIGHT / _FILES[name]), seed)
    _keep(name, seed, model.SerializeToString())
    return model


_MADE: dict[tuple[str, int], tuple[Path, str]] = {}  # the files kept: path and SHA-256
_FOLDER: list[Path] = []  # the process's folder for them, made when first needed


def _kept(name: str, seed: int) -> onnx.ModelProto | None:
    """The model kept for ``name`` and ``seed``, if its file reads back whole; else None."""
    found = _MADE.get((name, seed))
    if found is None:
        return None
    path, digest = found
    try:
        data = path.read_bytes()
    except OSError:
        data = b""
    if hashlib.sha256(data).hexdigest() != digest:
        _MADE.pop((name, seed), None)  # changed or gone: made again
        return None
    return onnx.load_from_string(data)


def _keep(name: str, seed: int, data: bytes) -> None:
    """Keep ``data`` in the process's folder, written atomically; nothing if it cannot."""
    try:
        if not _FOLDER:
            folder = Path(tempfile.mkdtemp(prefix="autopart-zoo-"))
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            _FOLDER.append(folder)
        path = _FOLDER[0] / f"{name}-{seed}.onnx"
        atomic_write_bytes(path, data)
    except (OSError, OutputError):  # a full or read-only disk: made again each time
        return
    _MADE[(name, seed)] = (path, hashlib.sha256(data).hexdigest())


def resolve_model(model: str | Path | onnx.ModelProto) -> onnx.ModelProto:
    """Accept a zoo name, a path to an ``.onnx`` file, or a ModelProto."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, str) and model in _FILES:
        return load_zoo_model(model)
    path = Path(model)
    if not path.exists():
        raise ModelError(
            f"{model!r} is neither a file nor a zoo model (zoo: {', '.join(zoo_names())})"
        )
    return read_model(path)
