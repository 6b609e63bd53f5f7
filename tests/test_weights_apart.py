"""A large model's weights as files beside it: written once, read back the same, never half.

The thresholds are lowered for the tests, so that a small model takes the path vgg19 does.
The OpenVINO tests are oracle tests against the numpy reference, on the export, the model
as shipped and the compile in a worker process.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autopart import api
from autopart.errors import OutputError
from autopart.ir import weights
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.ir.weights import WeightFiles, WeightsElsewhere, model_size, weights_apart
from autopart.plan.build import build_plan_for
from autopart.runtime import random_inputs
from autopart.runtime.executor import Executor
from autopart.runtime.plan_executor import PlanExecutor
from autopart.targets.resolve import available_targets
from tests.conftest import make_model

ROWS = 256  # a 256 x 256 f32 weight: 256 KiB


def dense_model() -> onnx.ModelProto:
    """x (2, ROWS) -> MatMul(w1) -> Add(b) -> Relu -> MatMul(w2): two large weights, one small."""
    rng = np.random.default_rng(0)
    tensors = {
        "w1": rng.standard_normal((ROWS, ROWS)) / 16,
        "b": rng.standard_normal(ROWS),
        "w2": rng.standard_normal((ROWS, ROWS)) / 16,
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, ROWS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, ROWS])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in tensors.items()],
    )
    return make_model(graph)


@pytest.fixture
def small_thresholds(monkeypatch: Any, tmp_path: Path) -> WeightFiles:
    """Weights of 64 KiB or more move apart from models of 128 KiB, into a fresh folder."""
    monkeypatch.setattr(weights, "MODEL_BYTES", 128 << 10)
    monkeypatch.setattr(weights, "TENSOR_BYTES", 64 << 10)
    files = WeightFiles()
    monkeypatch.setattr(files, "_folder", tmp_path / "weights")
    (tmp_path / "weights").mkdir()
    monkeypatch.setattr(weights, "WEIGHT_FILES", files)
    return files


def initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_a_large_models_large_weights_move_and_read_back_the_same(
    small_thresholds: WeightFiles,
) -> None:
    model = dense_model()
    want = initializers(model)
    moved = weights_apart(model)
    assert moved == 2 * ROWS * ROWS * 4  # w1 and w2; b (1 KiB) stays inside
    external = {t.name for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL}
    assert external == {"w1", "w2"}
    path = small_thresholds.folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    back = initializers(onnx.load(str(path)))
    assert set(back) == set(want)
    for name, array in want.items():
        np.testing.assert_array_equal(back[name], array)


def test_a_small_model_keeps_its_weights(small_thresholds: WeightFiles, monkeypatch: Any) -> None:
    monkeypatch.setattr(weights, "MODEL_BYTES", 1 << 30)
    model = dense_model()
    before = model.SerializeToString()
    assert weights_apart(model) == 0
    assert model.SerializeToString() == before
    assert not list(small_thresholds.folder.iterdir())


def test_one_weight_is_one_file_however_often_it_is_exported(
    small_thresholds: WeightFiles,
) -> None:
    graph = api.load(dense_model())
    first = small_thresholds.tensor(graph, "w1")
    again = small_thresholds.tensor(graph, "w1")
    assert first == again
    assert len(list(small_thresholds.folder.iterdir())) == 1
    model = dense_model()
    weights_apart(model)  # the same bytes moved from a model: the same file
    assert len(list(small_thresholds.folder.iterdir())) == 2  # w1's and w2's


def test_a_file_that_cannot_be_written_leaves_the_model_as_it_was(
    small_thresholds: WeightFiles, monkeypatch: Any
) -> None:
    model = dense_model()
    before = model.SerializeToString()
    written: list[str] = []

    def second_fails(location: str, data: Any) -> None:
        if written:
            raise OutputError(f"cannot write {location}: no space left")
        written.append(location)

    monkeypatch.setattr(small_thresholds, "_write", second_fails)
    with pytest.raises(OutputError):
        weights_apart(model)
    assert model.SerializeToString() == before


def test_a_model_counts_the_weights_it_refers_to(tmp_path: Path) -> None:
    assert model_size(b"abc") == 3
    assert model_size(WeightsElsewhere(b"abc", tmp_path, 1000)) == 1003


def _outputs_and_sources(graph: Graph, target: str, source: str) -> tuple[Any, list[bytes]]:
    chosen = VirtualDevice.parse(target)
    plan = build_plan_for(graph, {node.name: chosen for node in graph}, chosen, source)
    executor = PlanExecutor(plan, graph)
    try:
        outputs = executor.run(random_inputs(graph, seed=1)).outputs
        sources = [step.compiled.model_bytes for step in executor.steps.values() if step.compiled]
    finally:
        executor.close()
    return outputs, sources


@pytest.mark.parametrize("target", ["cpu@onnxruntime", "cpu@openvino"])
@pytest.mark.parametrize("shipped", [False, True], ids=["export", "as-shipped"])
def test_a_library_reads_weights_from_files_and_matches_the_reference(
    small_thresholds: WeightFiles, tmp_path: Path, shipped: bool, target: str
) -> None:
    if target not in {str(t) for t in available_targets()}:
        pytest.skip(f"{target} is not available here")
    if target == "cpu@openvino":
        from autopart.targets.openvino import library

        library.forget_compiled()
    model = dense_model()
    source = str(tmp_path / "dense.onnx") if shipped else "in memory"
    if shipped:
        onnx.save(model, source)
    graph = api.load(source if shipped else model)
    outputs, sources = _outputs_and_sources(graph, target, source)
    assert all(isinstance(made, WeightsElsewhere) for made in sources) and sources
    assert all(len(made) < ROWS * ROWS for made in sources)  # the weights are not in them
    want = Executor(graph).run(random_inputs(graph, seed=1)).outputs
    np.testing.assert_allclose(outputs["y"], want["y"], rtol=1e-4, atol=1e-5)


def test_the_worker_reads_the_weights_where_they_are(small_thresholds: WeightFiles) -> None:
    pytest.importorskip("openvino")
    from autopart.targets.openvino import library, worker

    model = dense_model()
    graph = api.load(model)
    moved = weights_apart(model)
    made = WeightsElsewhere(model.SerializeToString(), small_thresholds.folder, moved)
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
    blob = worker.compile_to_blob(made, config, None, deadline_s=120.0)
    imported = library.core().import_model(io.BytesIO(blob), library.DEVICE, config)
    feeds = random_inputs(graph, seed=2)
    have = imported.create_infer_request().infer([feeds["x"]])[0]
    want = Executor(graph).run(feeds).outputs["y"]
    np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)


def test_onnx_rewrites_a_model_with_its_large_weights_aside_and_back(monkeypatch: Any) -> None:
    from autopart.targets import qdq

    monkeypatch.setattr(weights, "TENSOR_BYTES", 64 << 10)
    model = dense_model()
    want = initializers(model)
    seen: list[int] = []

    def infer(light: onnx.ModelProto) -> onnx.ModelProto:
        seen.append(sum(len(t.raw_data) for t in light.graph.initializer))
        return onnx.shape_inference.infer_shapes(light)

    made = qdq._weights_aside(model, infer)
    assert seen == [ROWS * 4]  # only b went through the rewrite
    assert {v.name for v in made.graph.value_info} >= {"h", "a", "r"}  # shapes inferred
    back = initializers(made)
    for name, array in want.items():
        np.testing.assert_array_equal(back[name], array)


def test_a_rewrite_that_loses_a_weight_is_an_error(monkeypatch: Any) -> None:
    from autopart.errors import TargetError
    from autopart.targets import qdq

    monkeypatch.setattr(weights, "TENSOR_BYTES", 64 << 10)

    def drop_w2(light: onnx.ModelProto) -> onnx.ModelProto:
        kept = [t for t in light.graph.initializer if t.name != "w2"]
        del light.graph.initializer[:]
        light.graph.initializer.extend(kept)
        return light

    with pytest.raises(TargetError, match="w2"):
        qdq._weights_aside(dense_model(), drop_w2)


def test_a_tensors_raw_size_is_its_raw_datas_length() -> None:
    from autopart.ir.weights import raw_size

    arrays = [np.zeros((3, 5), np.float32), np.arange(7, dtype=np.int64), np.ones(4, np.float16)]
    for array in arrays:
        tensor = numpy_helper.from_array(array, "t")
        assert raw_size(tensor) == len(tensor.raw_data) == array.nbytes
    assert raw_size(helper.make_tensor("f", TensorProto.FLOAT, [2], [1.0, 2.0])) == 0


def test_openvino_leaves_no_weight_file_resident_and_keeps_no_export_of_it(
    small_thresholds: WeightFiles, monkeypatch: Any
) -> None:
    """OpenVINO keeps its mapping of the weight files beside the weights it reordered:
    those pages are paged out once it has compiled; and an export, which would hold the
    weights twice in memory of its own when imported, is never kept."""
    if "cpu@openvino" not in {str(t) for t in available_targets()}:
        pytest.skip("cpu@openvino is not available here")
    from autopart.host_memory import mapped_resident_bytes
    from autopart.targets.openvino import library
    from autopart.targets.openvino.blobs import BlobStore

    store = BlobStore(min_compile_s=0.0)  # every compile counts as slow
    monkeypatch.setattr(library, "BLOBS", store)
    library.forget_compiled()
    graph = api.load(dense_model())
    chosen = VirtualDevice.parse("cpu@openvino")
    plan = build_plan_for(graph, {node.name: chosen for node in graph}, chosen, "in memory")
    feeds = random_inputs(graph, seed=1)
    want = Executor(graph).run(feeds).outputs["y"]
    for _ in range(2):
        library.forget_compiled()  # compiled again, not taken from the cache in memory
        executor = PlanExecutor(plan, graph)
        try:
            have = executor.run(feeds).outputs["y"]
            assert mapped_resident_bytes(small_thresholds.folder) < ROWS * ROWS * 4 // 4
        finally:
            executor.close()
        np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)
    assert store.imports == 0 and store._folder is None


def test_an_exports_digest_follows_its_weights_without_making_them() -> None:
    import tracemalloc

    graph = api.load(dense_model())
    nodes, inputs, outputs = list(graph.nodes), list(graph.inputs), list(graph.outputs)
    first = weights.export_digest(graph, nodes, inputs, outputs)
    assert first == weights.export_digest(api.load(dense_model()), nodes, inputs, outputs)
    assert first != weights.export_digest(graph, nodes[:2], inputs, ["a"])
    fresh = api.load(dense_model())  # its weights not yet hashed
    tracemalloc.start()
    weights.export_digest(fresh, list(fresh.nodes), inputs, outputs)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < ROWS * ROWS * 4  # not one weight's bytes
    changed = graph.value("w2").const.copy()
    changed[0, 0] += 1.0
    graph.value("w2").const = changed
    assert weights.export_digest(graph, nodes, inputs, outputs) != first


def _openvino_peers(path: str, graph: Graph) -> list[Any]:
    """OpenVINO as installed, in f32 and after NNCF's int8, on ``path``, where installed."""
    from autopart.targets.openvino import library
    from autopart.targets.openvino.nncf_peer import nncf_int8
    from autopart.targets.openvino.peer import openvino_alone
    from autopart.targets.peer import PeerInputs

    if not library.HAVE_OPENVINO:
        return []
    made = [openvino_alone(path), openvino_alone(path, f32=True)]
    if importlib.util.find_spec("nncf") is not None:
        calibration = [random_inputs(graph, seed) for seed in range(2)]
        made.append(nncf_int8(path, PeerInputs(calibration=calibration)))
    return made


def test_a_large_model_as_shipped_is_read_once_however_often_it_is_asked(
    small_thresholds: WeightFiles, monkeypatch: Any, tmp_path: Path
) -> None:
    """Each peer, a plan's check and every compile of the whole model as shipped ask for
    it: vgg19's bench read and parsed it each time, 1.1 GiB over what it held. A large
    model is read once; a changed file, or its weights' folder gone, is read again."""
    from autopart.targets import peer, shipped
    from autopart.targets.codegen import HOST
    from autopart.targets.onnxruntime.peer import onnxruntime_alone

    reads: list[object] = []
    read_model = peer.resolve_model

    def counted(source: Any) -> onnx.ModelProto:
        reads.append(source)
        return read_model(source)

    monkeypatch.setattr(peer, "resolve_model", counted)
    path = tmp_path / "dense.onnx"
    onnx.save(dense_model(), str(path))
    graph = api.load(str(path))
    alone = dataclasses.replace(HOST, alone=True)
    asked = [shipped.shipped_whole(graph, graph.nodes, alone, [None], True) for _ in range(3)]
    runner = onnxruntime_alone(str(path))
    others = _openvino_peers(str(path), graph)  # OpenVINO's peers read the same source
    assert len(reads) == 1
    first = asked[0]
    assert first is not None and isinstance(first.model_bytes, WeightsElsewhere)
    assert all(a is not None and a.model_bytes == first.model_bytes for a in asked)
    back = initializers(onnx.load(str(first.model_bytes.path())))
    for name, array in initializers(dense_model()).items():
        np.testing.assert_array_equal(back[name], array)
    feeds = random_inputs(graph, seed=1)
    expected = Executor(graph).run(feeds).outputs["y"]
    np.testing.assert_allclose(runner(feeds)["y"], expected, rtol=1e-4, atol=1e-5)
    for other in others:  # bf16 and int8 where the CPU has them: the answers, roughly
        np.testing.assert_allclose(other(feeds)["y"], expected, rtol=0.1, atol=0.1)
    changed = dense_model()
    changed.graph.initializer[0].raw_data = np.ones((ROWS, ROWS), np.float32).tobytes()
    onnx.save(changed, str(path))
    os.utime(path, ns=(1, 1))  # another mtime, whatever the clock's resolution
    again = shipped.shipped_whole(graph, graph.nodes, alone, [None], True)
    assert len(reads) == 2 and again is not None and again.model_bytes != first.model_bytes
    shutil.rmtree(small_thresholds.folder)
    (tmp_path / "other").mkdir()
    monkeypatch.setattr(small_thresholds, "_folder", tmp_path / "other")
    shipped.shipped_whole(graph, graph.nodes, alone, [None], True)
    assert len(reads) == 3  # the weights' folder it referred to is gone
