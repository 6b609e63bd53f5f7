"""OpenVINO itself, for the ``openvino`` codegen: the lazy import, the Core, compiling.

openvino is optional and imported on first use: the import takes ~0.35 s, and on import
the package updates a usage counter in ``~/intel`` (OpenVINO's telemetry, which also sends
an event when the user consented). Importing this module never imports openvino.
Every model is read from serialised ONNX in memory and compiled with the target's
precision as ``INFERENCE_PRECISION_HINT`` (f32 unless the target names bf16): OpenVINO's CPU
default on CPUs with avx512_bf16 or AMX is bf16, about 1e-2 (relative) from the reference,
so f32 is always asked for explicitly. Compiled models are cached per process by the hash
of the model and the compile properties.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from autopart.errors import OutputError, TargetError
from autopart.host_memory import page_out, release_freed_memory
from autopart.ir.weights import WeightsElsewhere, model_size
from autopart.targets.cpu_units import WIDE_INT8_FLAGS
from autopart.targets.deadline import compile_deadline
from autopart.targets.held import Held
from autopart.targets.openvino import worker
from autopart.targets.openvino.blobs import BlobStore
from autopart.targets.openvino.narrow import stores_narrow_tensors


def _installed() -> bool:
    """Whether the openvino package can be found, without importing it (that takes ~0.35 s)."""
    try:
        return importlib.util.find_spec("openvino") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules holds None or a spec-less stub
        return False


# Module-level flag read at call time (tests monkeypatch it to simulate a missing package).
HAVE_OPENVINO: bool = _installed()

MISSING_MESSAGE = "codegen openvino needs the openvino package: pip install openvino"
DEVICE = "CPU"
PRECISION = "f32"  # INFERENCE_PRECISION_HINT of a target that names no precision
# autopart's precision names -> OpenVINO's INFERENCE_PRECISION_HINT values and its
# OPTIMIZATION_CAPABILITIES entry, for the precisions set by a hint.
# int8 is no hint: its ops are quantised in the model (QDQ), the rest compute in f32.
HINTS = {"f32": "f32", "bf16": "bf16", "int8": "f32"}
CAPABILITIES = {"f32": "FP32", "bf16": "BF16", "int8": "INT8"}
# CPU flags (/proc/cpuinfo) of units that compute in bf16: AVX-512 BF16 or AMX.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
# CPU flags of units that multiply u8 by i8 and add the pairs: VNNI or AMX into i32 in one
# instruction, AVX2 into i16 (vpmaddubsw). OpenVINO's int8 kernels use each; on a 2-core
# EPYC with AVX2 alone, NNCF's int8 resnet50 and squeezenet ran at 0.54-0.57x OpenVINO's
# f32 (docs/precision.md). AVX2's i16 sums saturate at full-range weights, so there they
# take 7 bits (autopart.targets.qdq), and a plan's error is measured, as everywhere.
INT8_FLAGS = WIDE_INT8_FLAGS | {"avx2"}

# The most recently used compiled models (profiling compiles hundreds of one-op models),
# within a total of serialised model bytes: a compiled model holds 1.7-5.6x its weights
# resident, and a tune of vgg19 (548 MB) compiles it whole for every target it measures.
# At 1 GiB, resnet50's tune kept the screen's whole models compiled into the race: its
# measure stage peaked at 2.8 GiB and its race at 3.3; at 128 MiB, 1.9 and 2.7. At 128 MiB
# the last whole model compiled (98 MiB serialised, 0.3-0.4 GiB compiled) was still kept
# beside the race's own runners: its tune peaked at 1.54 GiB, against 1.31 at 32 MiB, in
# the same time (a whole model's runner holds its own compile; a slow compile is imported
# from the blob store). A model over the limit is never kept, not even alone.
COMPILED_CACHE_SIZE = 256
COMPILED_CACHE_BYTES = 32 << 20
_Shapes = tuple[tuple[str, tuple[int, ...]], ...]
_Key = tuple[str, tuple[tuple[str, str], ...], tuple[str, ...], _Shapes]
_COMPILED: OrderedDict[_Key, Any] = OrderedDict()
_COMPILED_BYTES: dict[_Key, int] = {}
BLOBS = BlobStore()
_COMPILE_LOCK = threading.Lock()
# A compiled model a runner still holds is shared by every compile of its key (the race
# holds OpenVINO as installed and the whole-device plan at its precision: one compile).
_LIVE = Held()
_ov: Any = None
_core: Any = None


def load_openvino() -> Any:
    """The openvino module, imported on first use; :class:`TargetError` when it cannot be."""
    global _ov
    if _ov is None:
        try:
            import openvino
        except ImportError:
            raise TargetError(MISSING_MESSAGE) from None
        _ov = openvino
    return _ov


def core() -> Any:
    """The process's one ``openvino.Core`` (plugin loading is paid once)."""
    global _core
    if _core is None:
        _core = load_openvino().Core()
    return _core


DYNAMIC_QUANTIZATION = "DYNAMIC_QUANTIZATION_GROUP_SIZE"  # 0: activations stay float


def target_config(cores: Sequence[int] | None, precision: str | None = None) -> dict[str, str]:
    """OpenVINO compile properties: the whole device when ``cores`` is None, else a unit.

    The whole device gets the LATENCY hint and ``precision``'s inference precision hint
    (None: :data:`PRECISION`), nothing else, but at f32 :data:`DYNAMIC_QUANTIZATION` off:
    by default the CPU plugin quantises activations to int8 for models whose weights are
    stored in int8, which moved a MiniLM's f32 outputs by 0.8% (5e-7 with it off). A unit
    also gets one stream, one inference thread per core and OpenVINO's pinning off: the
    caller pins the calling thread to the unit's cores.
    """
    hint = HINTS[precision or PRECISION]
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": hint}
    if (precision or PRECISION) == PRECISION:  # f32 means f32: no int8 activations on the side
        config[DYNAMIC_QUANTIZATION] = "0"
    if cores is not None:
        config["NUM_STREAMS"] = "1"
        config["INFERENCE_NUM_THREADS"] = str(max(len(cores), 1))
        config["ENABLE_CPU_PINNING"] = "NO"
    return config


def offered_precisions(cpu_flags: frozenset[str] | None) -> tuple[str, ...]:
    """The precisions OpenVINO's CPU plugin computes in here, f32 first.

    bf16 is offered where OpenVINO lists ``BF16`` among the CPU's
    ``OPTIMIZATION_CAPABILITIES`` and ``cpu_flags`` (None: the OS cannot say) has a bf16
    unit (:data:`BF16_FLAGS`); int8 where it lists ``INT8`` and the flags show AVX2, VNNI or
    AMX (:data:`INT8_FLAGS`). Without openvino: nothing.
    """
    if not HAVE_OPENVINO:
        return ()
    capabilities = set(core().get_property(DEVICE, "OPTIMIZATION_CAPABILITIES"))
    offered = ["f32"]
    for precision, units in (("bf16", BF16_FLAGS), ("int8", INT8_FLAGS)):
        if CAPABILITIES[precision] in capabilities and (cpu_flags is None or cpu_flags & units):
            offered.append(precision)
    return tuple(offered)


def default_precision() -> str:
    """The precision OpenVINO's CPU plugin computes in when given no properties."""
    hint = str(core().get_property(DEVICE, "INFERENCE_PRECISION_HINT")).lower()
    return "bf16" if "bf16" in hint or "bfloat16" in hint else "f32"


def first_line(error: BaseException) -> str:
    """The first informative line of an OpenVINO error (they start with source locations)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    for line in lines:
        if not line.startswith("Exception from") and not line.startswith("Check '"):
            return line
    return lines[-1] if lines else type(error).__name__


def feed(value: Any) -> np.ndarray:
    """``value`` as an array OpenVINO's Python API takes: C-contiguous, canonical dtype.

    numpy has two int64 types on Linux (``long`` and ``longlong``, equal but with different
    type numbers); onnxruntime returns the second, which OpenVINO refuses to share
    ("Unsupported data type: int64"). Such arrays are viewed as the canonical type.
    """
    array = np.asarray(value, order="C")
    canonical = np.dtype(array.dtype.str)
    return array if array.dtype.num == canonical.num else array.view(canonical)


def read_onnx(model_bytes: bytes) -> Any:
    """An ``openvino.Model`` from serialised ONNX, read from memory (no weights file).

    :class:`WeightsElsewhere` is read from a file in its folder instead (written once);
    :class:`TargetError` when that file cannot be written.
    """
    if isinstance(model_bytes, WeightsElsewhere):
        try:
            path = model_bytes.path()
        except OutputError as error:
            raise TargetError(f"openvino could not read the exported model: {error}") from None
        return core().read_model(str(path))
    empty_weights = load_openvino().Tensor(np.empty(0, np.uint8))
    return core().read_model(model_bytes, empty_weights)


_NEVER_IN_ISLANDS = ("Parameter", "Result", "Constant", "Convert")


def add_islands(model: Any, nodes: Collection[str], outputs: Collection[str]) -> int:
    """Make the ops of ONNX ``nodes`` in ``model`` compute in bf16, the rest as they were.

    An ONNX node's ops are those OpenVINO's frontend names after it (``name`` or
    ``name/...``) or whose output tensors carry one of its ``outputs``. Their f32 inputs
    from outside the island are converted to bf16 (weights included), and their bf16
    outputs converted (back) to f32 for every reader outside: Convert islands, which the CPU
    plugin runs in bf16 under an f32 inference precision. A Convert (an ONNX Cast) stays
    outside: its output type is its own, so an f32 Cast inside would hand f32 to island
    ops whose other inputs are bf16. Returns how many ops it covers.
    """
    ov = load_openvino()
    ops = ov.opset13
    wanted, named = set(nodes), set(outputs)
    island = {
        op.get_friendly_name()
        for op in model.get_ordered_ops()
        if op.get_type_name() not in _NEVER_IN_ISLANDS
        and (
            op.get_friendly_name() in wanted
            or op.get_friendly_name().split("/", 1)[0] in wanted
            or any(named & set(port.get_names()) for port in op.outputs())
        )
    }
    inside = [op for op in model.get_ordered_ops() if op.get_friendly_name() in island]
    for op in inside:  # both edges at once: no bf16 type may reach an op outside
        for port in op.inputs():
            source = port.get_source_output()
            outside = source.get_node().get_friendly_name() not in island
            if outside and source.get_element_type() == ov.Type.f32:
                port.replace_source_output(ops.convert(source, "bf16").output(0))
        for output in op.outputs():
            readers = [
                port
                for port in output.get_target_inputs()
                if port.get_node().get_friendly_name() not in island
            ]
            if readers and output.get_element_type() == ov.Type.f32:
                back = ops.convert(output, "f32").output(0)
                for port in readers:
                    port.replace_source_output(back)
    model.validate_nodes_and_infer_types()
    return len(inside)


def compiled_model(
    model_bytes: bytes,
    config: dict[str, str],
    islands: Collection[str] = (),
    island_outputs: Collection[str] = (),
    shapes: Mapping[str, Sequence[int]] | None = None,
) -> Any:
    """The ``openvino.CompiledModel`` of ``model_bytes`` under ``config``, cached per process.

    ``islands`` names ONNX nodes that compute in bf16 inside an f32 model (their outputs
    ``island_outputs``; see :func:`add_islands`); ``shapes`` are static shapes for inputs
    of dynamic shape (:func:`reshape_dynamic`). The key is the SHA-256 of the serialised
    model, the properties, the islands and the shapes; the cache keeps the
    :data:`COMPILED_CACHE_SIZE` most recently used models, fewer where their serialised
    bytes pass :data:`COMPILED_CACHE_BYTES` (subgraphs keep theirs alive).
    Raises :class:`TargetError` with OpenVINO's first informative line when it fails.
    """
    digest = hashlib.sha256(model_bytes).hexdigest()
    config = settled_config(model_bytes, config, digest)
    key = _key(model_bytes, config, islands, shapes, digest)
    with _COMPILE_LOCK:
        cached = _COMPILED.get(key)
        if cached is None:
            cached = _LIVE.get_or_make(
                key, lambda: _compile(key, model_bytes, config, islands, island_outputs, shapes)
            )
            _COMPILED[key] = cached
            _COMPILED_BYTES[key] = model_size(model_bytes)
        _COMPILED.move_to_end(key)
        while _COMPILED and (
            len(_COMPILED) > COMPILED_CACHE_SIZE
            or sum(_COMPILED_BYTES.values()) > COMPILED_CACHE_BYTES
        ):
            oldest, _ = _COMPILED.popitem(last=False)
            _COMPILED_BYTES.pop(oldest, None)
    return cached


def forget_compiled() -> None:
    """Empty the cache of compiled models; models compiled from it stay valid while held.

    The cache is bounded by serialised bytes, but a compiled model holds about three
    times its serialised size (resnet50's profile: 125 MiB serialised, 0.37 GiB resident).
    """
    with _COMPILE_LOCK:
        _COMPILED.clear()
        _COMPILED_BYTES.clear()


def compiled_once(
    model_bytes: bytes, config: dict[str, str], shapes: Mapping[str, Sequence[int]] | None = None
) -> Any:
    """``model_bytes`` compiled under ``config``, not kept in memory after its last use.

    As :func:`compiled_model`, but outside its cache (a peer's runner holds its own), so
    a large model is not kept compiled after its runner is freed; a slow compile is still
    paid once per process (:mod:`~autopart.targets.openvino.blobs`). Raises OpenVINO's
    own exceptions.
    """
    digest = hashlib.sha256(model_bytes).hexdigest()
    config = settled_config(model_bytes, config, digest)
    key = _key(model_bytes, config, (), shapes, digest)
    return _LIVE.get_or_make(key, lambda: _compile(key, model_bytes, config, (), (), shapes))


def _key(
    model_bytes: bytes,
    config: Mapping[str, str],
    islands: Collection[str],
    shapes: Mapping[str, Sequence[int]] | None,
    digest: str | None = None,
) -> _Key:
    """The cache key: the model's SHA-256, the properties, the islands and the shapes.

    The properties are keyed as the model compiles under them (:func:`settled_config`)
    and as the plugin takes them (:func:`effective_config`): OpenVINO as installed,
    compiled with none, keys as the whole-device plan at the default precision (the two
    hints; at f32 int8 activations off, which changes nothing in a model that stores no
    8-bit tensor), and is compiled once (a 12,400-node stack: 15-30 s a compile, both in
    every tune's screen). ``digest``: the model's SHA-256, where the caller has it.
    """
    digest = digest or hashlib.sha256(model_bytes).hexdigest()
    return (
        digest,
        tuple(sorted(effective_config(settled_config(model_bytes, config, digest)).items())),
        tuple(sorted(islands)),
        tuple(sorted((name, tuple(shape)) for name, shape in (shapes or {}).items())),
    )


def settled_config(
    model_bytes: bytes, config: Mapping[str, str], digest: str | None = None
) -> dict[str, str]:
    """``config`` as ``model_bytes`` compiles under it (``digest``: its SHA-256, if known).

    Without :data:`DYNAMIC_QUANTIZATION`'s "0" where the model stores no tensor of 8 bits
    or fewer (:func:`~autopart.targets.openvino.narrow.stores_narrow_tensors`): the plugin
    quantises activations only beside such weights, so there it changes nothing, and the
    whole-device f32 plan of such a model compiles as OpenVINO as installed does on a CPU
    that computes in f32 by default (one compile, shared while either holds it).
    """
    if config.get(DYNAMIC_QUANTIZATION) != "0":
        return dict(config)
    digest = digest or hashlib.sha256(model_bytes).hexdigest()
    if stores_narrow_tensors(digest, model_bytes):
        return dict(config)
    return {name: value for name, value in config.items() if name != DYNAMIC_QUANTIZATION}


def effective_config(config: Mapping[str, str]) -> dict[str, str]:
    """``config`` with the plugin's own default for each of the two hints it omits.

    The performance and the precision hint only: each is a setting of its own, which the
    plugin resolves to its default whatever else is set, so a model compiled without one
    compiles as with its default (the compiled models report the same properties; a test
    checks it). Other properties' defaults depend on the hints (the streams, the threads)
    and stay as given.
    """
    return {**_plugin_defaults(), **config}


@functools.cache
def _plugin_defaults() -> dict[str, str]:
    """The two hints as the CPU plugin resolves them by default, spelt as autopart sets them."""
    mode = str(core().get_property(DEVICE, "PERFORMANCE_HINT")).rsplit(".", 1)[-1]
    defaults = {"PERFORMANCE_HINT": mode}  # PerformanceMode.LATENCY -> LATENCY
    precision = core().get_property(DEVICE, "INFERENCE_PRECISION_HINT").get_type_name()
    if precision in HINTS.values():  # another (f16 on ARM) is never spelt as a target's
        defaults["INFERENCE_PRECISION_HINT"] = precision
    return defaults


def compile_onnx(
    model_bytes: bytes,
    config: Mapping[str, str],
    shapes: Mapping[str, Sequence[int]] | None = None,
    islands: Collection[str] = (),
    island_outputs: Collection[str] = (),
) -> Any:
    """``model_bytes`` read, given static ``shapes`` and bf16 ``islands``, and compiled now.

    No cache and no deadline (:func:`compiled_model` has both); OpenVINO's own exceptions.
    """
    model = read_onnx(model_bytes)
    if shapes:
        reshape_dynamic(model, shapes)
    if islands:
        add_islands(model, islands, island_outputs)
    return core().compile_model(model, DEVICE, dict(config))


def _compile(
    key: _Key,
    model_bytes: bytes,
    config: dict[str, str],
    islands: Collection[str],
    island_outputs: Collection[str],
    shapes: Mapping[str, Sequence[int]] | None,
) -> Any:
    """Compile (or import the process's export of) one model; :class:`TargetError` if not.

    Under a compile deadline (:mod:`autopart.targets.deadline`) a model not compiled before
    is compiled in a worker process that is stopped when it passes
    (:class:`~autopart.targets.deadline.CompileTimeoutError`). A model whose large weights
    are files (:class:`WeightsElsewhere`) is compiled each time, never imported from a kept
    export: OpenVINO maps the files and reorders the weights into memory of its own, and the
    mapped pages are then paged out (:func:`~autopart.host_memory.page_out`), where an
    import holds the weights twice in its own memory (vgg19 in f32: 1.10 GiB against 0.57).
    """

    def compile_now() -> Any:
        return compile_onnx(model_bytes, config, shapes, islands, island_outputs)

    deadline = compile_deadline()
    elsewhere = None
    if deadline is not None and not islands:

        def elsewhere() -> bytes:
            return worker.compile_to_blob(model_bytes, config, shapes, deadline)

    apart = isinstance(model_bytes, WeightsElsewhere)
    if apart:  # the large model parsed and serialised for this compile lies freed in the heap
        release_freed_memory()  # before OpenVINO allocates in its own threads' arenas
    try:
        compiled = BLOBS.compile(
            repr(key),
            compile_now,
            lambda stream: core().import_model(stream, DEVICE, config),
            elsewhere,
            keep=not apart,  # an import holds the weights twice in memory of its own
        )
    except TargetError:
        raise
    except Exception as error:  # OpenVINO's exception types are not specific
        raise TargetError(f"openvino rejected the subgraph: {first_line(error)}") from None
    if apart:
        page_out(model_bytes.folder)  # read and reordered: the mapped files lie cold
    return compiled


def port_names(ports: Sequence[Any], wanted: Sequence[str]) -> list[list[str]]:
    """Per port, the names of ``wanted`` it carries, in ``wanted``'s order; else its any-name.

    OpenVINO merges the names of the tensors it folds into one (an ``Identity``'s input and
    output, say), and ``get_any_name`` may answer with any of them, not the model's own
    input or output name. A port carrying two wanted names (two graph outputs that are one
    tensor) gets both.
    """
    order = {name: index for index, name in enumerate(wanted)}
    named = []
    for port in ports:
        mine = sorted((n for n in port.get_names() if n in order), key=order.__getitem__)
        named.append(mine or [port.get_any_name()])
    return named


def reshape_dynamic(model: Any, shapes: Mapping[str, Sequence[int]]) -> None:
    """Give ``model``'s inputs of dynamic shape the static ``shapes`` named for them.

    As a user compiling a dynamic model for the one shape they run reshapes it.
    """
    static = {}
    for port, names in zip(model.inputs, port_names(model.inputs, list(shapes)), strict=True):
        if port.get_partial_shape().is_dynamic and names[0] in shapes:
            static[port.get_any_name()] = list(shapes[names[0]])
    if static:
        model.reshape(static)


def clear_compiled() -> None:
    """Forget every compiled model, in memory and on disk (for tests)."""
    forget_compiled()
    BLOBS.clear()
    _LIVE.clear()
