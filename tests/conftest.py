from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def max_relative_error(expected: np.ndarray, actual: np.ndarray) -> float:
    """max |a - e| / max |e|, the accuracy figure the issues quote."""
    scale = float(np.abs(expected).max()) or 1.0
    return float(np.abs(actual.astype(np.float64) - expected).max()) / scale


def run_onnxruntime(
    model: onnx.ModelProto | str | Path, feeds: dict[str, np.ndarray]
) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def make_model(graph: onnx.GraphProto, opset: int = 17) -> onnx.ModelProto:
    """A model at ``opset`` with the oldest IR version that carries it (onnxruntime lags onnx)."""
    opsets = [onnx.helper.make_opsetid("", opset)]
    model = onnx.helper.make_model(graph, opset_imports=opsets)
    model.ir_version = onnx.helper.find_min_ir_version_for(opsets)
    return model


def one_node_model(
    op_type: str,
    feeds: Mapping[str, np.ndarray | None],
    opset: int,
    output_type: type = np.float32,
    **attributes: object,
) -> onnx.ModelProto:
    """A model of one ``op_type`` node reading ``feeds`` in order into ``y`` of ``output_type``.

    Each input is typed and shaped as its array; a None feed is an optional input left out.
    """
    node = onnx.helper.make_node(
        op_type, [name if value is not None else "" for name, value in feeds.items()], ["y"],
        **attributes,
    )  # fmt: skip
    inputs = [
        onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(value.dtype), value.shape
        )
        for name, value in feeds.items()
        if value is not None
    ]
    element = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(output_type))
    output = [onnx.helper.make_tensor_value_info("y", element, None)]
    return make_model(onnx.helper.make_graph([node], op_type, inputs, output), opset)


def by_the_spec(
    op_type: str, feeds: Mapping[str, np.ndarray | None], opset: int, **attributes: object
) -> np.ndarray:
    """``op_type``'s output on ``feeds`` as onnx's own reference computes it (see one_node_model)."""
    from onnx.reference import ReferenceEvaluator

    model = one_node_model(op_type, feeds, opset, **attributes)
    given = {name: value for name, value in feeds.items() if value is not None}
    with np.errstate(all="ignore"):
        (output,) = ReferenceEvaluator(model).run(None, given)
    return np.asarray(output)


@pytest.fixture(scope="session")
def transformer_path() -> Path:
    return FIXTURES / "transformer_encoder.onnx"


# The zoo's models of hundreds of MB of weights (vgg19's 548 MB: each whole-model oracle
# run took 7-17 s): the default run leaves them to `-m slow`, and keeps those of a few MB.
HEAVY_ZOO = frozenset({"alexnet", "vgg19", "zfnet512"})


def zoo_params() -> list[object]:
    """Every zoo name as a test parameter, the heavy ones marked slow."""
    import autopart

    return [
        pytest.param(name, marks=pytest.mark.slow) if name in HEAVY_ZOO else name
        for name in autopart.zoo_names()
    ]


@pytest.fixture
def variant_peers_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """``openvino alone f32`` runs even where it compiles as OpenVINO as installed does.

    On a CPU whose OpenVINO computes in f32 by default the variant is another peer's
    configuration and is not run (``Peer.redundant``); tests of what a variant peer does
    ask for it to run wherever OpenVINO is installed.
    """
    import dataclasses

    from autopart.targets.openvino import peer
    from autopart.targets.peer import never

    monkeypatch.setattr(peer, "F32", dataclasses.replace(peer.F32, redundant=never))


@pytest.fixture(autouse=True, scope="module")
def _collector_spared_what_earlier_modules_left() -> None:
    """Exempt what is alive as each module starts from the cyclic collector, for good.

    As the console script does once its modules are imported
    (:func:`~autopart.host_memory.freeze_loaded_objects`): the tests run tunes whose stages
    end in a full collection (:func:`~autopart.host_memory.release_freed_memory`), which
    otherwise walked every module, test item and cache the session had made so far (0.1 s
    or more a collection, over a tier of a thousand tunes). Garbage in cycles is collected
    first; the module's own fixtures come after, and stay the collector's.
    """
    from autopart.host_memory import freeze_loaded_objects

    freeze_loaded_objects()
