"""Slow OpenVINO compiles kept on disk: a second compile of one model imports the first.

The store's rules run on stand-in compile and import calls; the real round trip (export,
import, the same outputs) runs on OpenVINO with every compile counted as slow.
"""

from __future__ import annotations

import io
import itertools
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autopart.targets.openvino.blobs import BlobStore
from autopart.testing.scale_models import op_chain


class _Compiled:
    """A stand-in compiled model whose export is its own payload."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def export_model(self) -> io.BytesIO:
        return io.BytesIO(self.payload)


def _calls(payload: bytes = b"model", compile_s: float = 0.0, import_s: float = 0.0) -> Any:
    counts = {"compiled": 0, "imported": 0}

    def compile_model() -> _Compiled:
        counts["compiled"] += 1
        time.sleep(compile_s)
        return _Compiled(payload)

    def import_model(stream: io.BytesIO) -> _Compiled:
        counts["imported"] += 1
        time.sleep(import_s)
        return _Compiled(stream.read())

    return counts, compile_model, import_model


def test_a_slow_compile_is_imported_the_second_time() -> None:
    store = BlobStore(min_compile_s=0.0)
    counts, compile_model, import_model = _calls()
    first = store.compile("k", compile_model, import_model)
    second = store.compile("k", compile_model, import_model)
    assert counts == {"compiled": 1, "imported": 1}
    assert second.payload == first.payload == b"model"


def test_a_quick_compile_is_not_exported() -> None:
    store = BlobStore(min_compile_s=60.0)
    counts, compile_model, import_model = _calls()
    store.compile("k", compile_model, import_model)
    store.compile("k", compile_model, import_model)
    assert counts == {"compiled": 2, "imported": 0}


def test_an_import_slower_than_its_compile_marks_the_key_to_be_compiled() -> None:
    store = BlobStore(min_compile_s=0.0)
    counts, compile_model, import_model = _calls(import_s=0.05)
    for _ in range(4):
        store.compile("k", compile_model, import_model)
    assert counts == {"compiled": 3, "imported": 1}


def test_a_changed_file_is_dropped_and_the_model_compiled(tmp_path: Path) -> None:
    store = BlobStore(min_compile_s=0.0)
    counts, compile_model, import_model = _calls()
    store.compile("k", compile_model, import_model)
    files = list(store._ensure_folder().glob("*.blob"))
    assert len(files) == 1
    files[0].write_bytes(b"other")
    assert store.compile("k", compile_model, import_model).payload == b"model"
    assert counts == {"compiled": 2, "imported": 0}


def test_the_files_stay_within_the_byte_cap() -> None:
    store = BlobStore(max_bytes=10, min_compile_s=0.0)
    for key in "abc":
        _, compile_model, import_model = _calls(payload=b"12345")
        store.compile(key, compile_model, import_model)
    folder = store._ensure_folder()
    assert sum(f.stat().st_size for f in folder.glob("*.blob")) <= 10
    assert not list(folder.glob("*.part"))
    store.clear()
    assert not list(folder.glob("*.blob"))


def test_openvino_imports_its_own_export_with_the_same_outputs(monkeypatch: Any) -> None:
    pytest.importorskip("openvino")
    from autopart.targets.openvino import library

    store = BlobStore(min_compile_s=0.0)
    monkeypatch.setattr(library, "BLOBS", store)
    model = op_chain(40).SerializeToString()
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
    x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    compiled = library.compiled_once(model, config)
    want = compiled.create_infer_request().infer([x])[0]
    del compiled  # held, it would be shared (test_a_held_model_is_shared_not_compiled_again)
    imported = library.compiled_once(model, config)
    assert store.imports == 1
    have = imported.create_infer_request().infer([x])[0]
    np.testing.assert_array_equal(have, want)


def test_a_compile_in_the_worker_imports_with_the_same_outputs() -> None:
    pytest.importorskip("openvino")
    from autopart.targets.openvino import library, worker

    model = op_chain(40).SerializeToString()
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
    blob = worker.compile_to_blob(model, config, None, deadline_s=120.0)
    imported = library.core().import_model(io.BytesIO(blob), library.DEVICE, config)
    x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    want = library.compiled_once(model, config).create_infer_request().infer([x])[0]
    np.testing.assert_array_equal(imported.create_infer_request().infer([x])[0], want)


def test_a_compile_past_its_deadline_is_stopped_and_says_so() -> None:
    pytest.importorskip("openvino")
    from autopart.targets.deadline import CompileTimeoutError, compiling_within
    from autopart.targets.openvino import library

    started = time.perf_counter()
    with (
        compiling_within(0.05),
        pytest.raises(CompileTimeoutError, match="did not finish compiling within"),
    ):
        library.compiled_once(op_chain(41).SerializeToString(), {})
    assert time.perf_counter() - started < 10.0  # stopped, not waited for


def test_under_a_deadline_the_worker_compiles_and_the_next_compile_imports_its_export(
    monkeypatch: Any,
) -> None:
    pytest.importorskip("openvino")
    from autopart.targets.deadline import compiling_within
    from autopart.targets.openvino import library

    store = BlobStore()
    monkeypatch.setattr(library, "BLOBS", store)
    model = op_chain(42).SerializeToString()
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
    x = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)
    direct = library.core().compile_model(library.read_onnx(model), library.DEVICE, config)
    want = direct.create_infer_request().infer([x])[0]
    with compiling_within(120.0):
        from_worker = library.compiled_once(model, config)
    np.testing.assert_array_equal(from_worker.create_infer_request().infer([x])[0], want)
    del from_worker  # no longer held: the next compile is not shared
    again = library.compiled_once(model, config)  # no deadline: the export is imported
    assert store.imports == 1
    np.testing.assert_array_equal(again.create_infer_request().infer([x])[0], want)


def test_an_export_that_cannot_be_written_keeps_nothing_and_the_model_still_compiles(
    monkeypatch: Any,
) -> None:
    from autopart.errors import OutputError
    from autopart.targets.openvino import blobs

    def full_disk(path: Any, data: bytes) -> None:
        raise OutputError(f"cannot write {path}: No space left on device")

    monkeypatch.setattr(blobs, "atomic_write_bytes", full_disk)
    store = BlobStore(min_compile_s=0.0)
    counts, compile_model, import_model = _calls()
    assert store.compile("k", compile_model, import_model).payload == b"model"
    assert store.compile("k", compile_model, import_model).payload == b"model"
    assert counts == {"compiled": 2, "imported": 0}


def test_a_store_told_not_to_keep_compiles_every_time_and_keeps_no_file() -> None:
    """A model whose import would hold more memory than its compile is never exported."""
    store = BlobStore(min_compile_s=0.0)
    counts, compile_model, import_model = _calls()
    for _ in range(2):
        assert store.compile("k", compile_model, import_model, keep=False).payload == b"model"
    assert counts == {"compiled": 2, "imported": 0}
    elsewhere_calls = []

    def elsewhere() -> bytes:
        elsewhere_calls.append(1)
        return b"from the worker"

    for _ in range(2):
        made = store.compile("w", compile_model, import_model, elsewhere, keep=False)
        assert made.payload == b"from the worker"
    assert len(elsewhere_calls) == 2 and counts["imported"] == 2 and store.imports == 0
    assert store._folder is None  # nothing was ever written


def test_a_nested_deadline_only_ever_comes_sooner() -> None:
    """Within an enclosing deadline, the earlier holds; None keeps the enclosing one (a
    race plan with no deadline of its own once lifted the screen's)."""
    from autopart.targets.deadline import compile_deadline, compiling_within

    assert compile_deadline() is None
    with compiling_within(10.0):
        with compiling_within(None):
            assert 9.0 < (compile_deadline() or 0.0) <= 10.0
        with compiling_within(100.0):
            assert (compile_deadline() or 0.0) <= 10.0
        with compiling_within(1.0):
            assert (compile_deadline() or 0.0) <= 1.0
        assert 9.0 < (compile_deadline() or 0.0) <= 10.0
    with compiling_within(None):
        assert compile_deadline() is None


def _properties(compiled: Any) -> dict[str, str]:
    """Every property a compiled model reports, as text."""
    found = {}
    for name in compiled.get_property("SUPPORTED_PROPERTIES"):
        try:
            found[name] = str(compiled.get_property(name))
        except Exception:  # a property the plugin lists but will not read back
            found[name] = "unreadable"
    return found


def test_compiles_keyed_alike_are_compiled_alike() -> None:
    """One cache key, one compiled configuration: wherever two configurations key alike
    (the plugin's defaults filled in), the models they compile report the same properties;
    OpenVINO as installed keys as the whole-device plan at its default precision."""
    pytest.importorskip("openvino")
    from autopart.targets.openvino import library

    model = op_chain(12).SerializeToString()
    default = library.default_precision()
    configs = [
        {},
        {"INFERENCE_PRECISION_HINT": "f32"},
        {"PERFORMANCE_HINT": "THROUGHPUT"},
        {"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"},
        *(library.target_config(None, p) for p in library.offered_precisions(None)),
        library.target_config([0], default),
    ]
    keys = [library._key(model, config, (), None) for config in configs]
    settled = [library.settled_config(model, config) for config in configs]  # as compiled
    reported = [_properties(library.compile_onnx(model, config)) for config in settled]
    for i, j in itertools.combinations(range(len(configs)), 2):
        if keys[i] == keys[j]:
            assert reported[i] == reported[j], (configs[i], configs[j])
    plan = library.target_config(None, default)  # at f32: int8 activations off, a no-op here
    assert library._key(model, {}, (), None) == library._key(model, plan, (), None)


def test_openvino_as_installed_and_its_whole_device_plan_compile_once(monkeypatch: Any) -> None:
    """The peer compiled with no properties and the plan at the default precision (the
    screen times both) are one compile: the second imports the first's export."""
    pytest.importorskip("openvino")
    from autopart.targets.openvino import library

    default = library.default_precision()
    store = BlobStore(min_compile_s=0.0)
    monkeypatch.setattr(library, "BLOBS", store)
    model = op_chain(43).SerializeToString()
    as_installed = library.compiled_once(model, {})
    x = np.random.default_rng(2).standard_normal((16, 64)).astype(np.float32)
    want = as_installed.create_infer_request().infer([x])[0]
    del as_installed  # the screen frees each runner before the next
    plan = library.compiled_once(model, library.target_config(None, default))
    assert store.imports == 1
    np.testing.assert_array_equal(plan.create_infer_request().infer([x])[0], want)


def test_a_held_model_is_shared_not_compiled_again(monkeypatch: Any) -> None:
    """While a runner holds a compiled model, another compile of its key is that model
    (the race holds OpenVINO as installed and its plan at once); freed, it is compiled or
    imported again, and nothing else kept it alive."""
    pytest.importorskip("openvino")
    from autopart.targets.openvino import library

    store = BlobStore(min_compile_s=0.0)
    monkeypatch.setattr(library, "BLOBS", store)
    model = op_chain(44).SerializeToString()
    config = library.target_config(None, library.default_precision())
    first = library.compiled_once(model, config)
    assert library.compiled_once(model, library.effective_config(config)) is first
    assert store.imports == 0
    gone = weakref.ref(first)
    del first
    assert gone() is None
    library.compiled_once(model, config)
    assert store.imports == 1


def test_openvino_as_installed_holds_its_compiled_model_while_it_lives(tmp_path: Path) -> None:
    """The peer's runner holds its compiled model (not only a request on it), so the race's
    compile of the same key, the whole-device plan at the default precision, shares it."""
    pytest.importorskip("openvino")
    import gc

    import onnx

    from autopart.targets.openvino import library
    from autopart.targets.openvino.peer import openvino_alone

    path = tmp_path / "chain.onnx"
    onnx.save(op_chain(45), path)
    runner = openvino_alone(str(path))
    gc.collect()
    held = [model for model in list(library._LIVE.values()) if model is runner.compiled]
    assert held, "the runner's compiled model is no longer known as held"
    x = np.random.default_rng(3).standard_normal((16, 64)).astype(np.float32)
    assert np.isfinite(next(iter(runner({"x": x}).values()))).all()


def _int8_weights_model() -> bytes:
    """x (4 x 64) times weights stored in int8 (DequantizeLinear of an int8 initializer)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = np.random.default_rng(5).integers(-127, 128, (64, 32)).astype(np.int8)
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["w", "scale"], ["w_float"]),
            helper.make_node("MatMul", ["x", "w_float"], ["y"]),
        ],
        "int8_weights",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        [numpy_helper.from_array(weights, "w"),
         numpy_helper.from_array(np.array(0.02, np.float32), "scale")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return onnx.checker.check_model(model) or model.SerializeToString()


def test_int8_activations_stay_off_only_where_the_model_stores_8_bit_tensors() -> None:
    """A model whose weights are stored in int8 compiles at f32 with the plugin's dynamic
    quantization off (it would move its outputs), so never as installed; a float model has
    nothing for it to quantise, and compiles as installed: the same outputs, bit for bit."""
    pytest.importorskip("openvino")
    from autopart.targets.openvino import library

    plan = library.target_config(None, library.PRECISION)
    assert plan[library.DYNAMIC_QUANTIZATION] == "0"
    int8 = _int8_weights_model()
    assert library.settled_config(int8, plan) == plan
    assert library._key(int8, plan, (), None) != library._key(int8, {}, (), None)
    float_model = op_chain(20).SerializeToString()
    settled = library.settled_config(float_model, plan)
    assert library.DYNAMIC_QUANTIZATION not in settled and settled.items() <= plan.items()
    assert library.settled_config(b"not a model", plan) == plan  # unreadable: kept off
    x = np.random.default_rng(3).standard_normal((16, 64)).astype(np.float32)
    outputs = [
        library.compile_onnx(float_model, config).create_infer_request().infer([x])[0]
        for config in (plan, settled)
    ]
    np.testing.assert_array_equal(outputs[0], outputs[1])
