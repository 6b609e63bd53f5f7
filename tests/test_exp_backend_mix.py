"""experiments/exp_backend_mix.py's aggregation on hand-made costs and bench tables (nothing runs)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest

from autopart import api
from autopart.costmodel.costs import Costs
from autopart.ir.target import VirtualDevice
from tests.experiment_import import import_experiment
from tests.test_profile import tiny_cnn

pytest.importorskip("matplotlib")
NUMPY, ORT, OCL = (
    VirtualDevice.parse(t) for t in ("cpu@numpy", "cpu@onnxruntime", "opencl:0@opencl")
)


@pytest.fixture(scope="module")
def mix() -> ModuleType:
    """The experiment's module, imported as its script would be (beside ``_common``)."""
    return import_experiment("exp_backend_mix")


def _costs() -> Costs:
    """tiny_cnn (conv1, relu1, conv2, add) on three targets; OpenCL cannot run the Add."""
    graph = api.load(tiny_cnn())
    seconds = {  # numpy, onnxruntime, opencl, in ms
        "conv1": (4.0, 2.0, 1.0),
        "conv2": (4.0, 2.0, 3.5),  # Conv: numpy 8, onnxruntime 4, opencl 4.5
        "relu1": (0.2, 0.5, 0.4),  # Relu: numpy first, opencl 2x behind
        "add": (0.3, 0.6, None),  # Add: opencl is no candidate
    }
    node_cost = {
        name: {t: ms * 1e-3 for t, ms in zip((NUMPY, ORT, OCL), row, strict=True) if ms}
        for name, row in seconds.items()
    }
    return Costs(graph, [NUMPY, ORT, OCL], node_cost)


def test_op_types_sum_their_nodes_and_the_fastest_codegen_leads_the_second(
    mix: ModuleType,
) -> None:
    ops = mix.op_type_costs("tiny", _costs())
    conv = ops[ops["op_type"] == "Conv"].set_index("codegen")["ms"]
    assert conv.to_dict() == pytest.approx({"numpy": 8.0, "onnxruntime": 4.0, "opencl": 4.5})
    assert set(ops.loc[ops["op_type"] == "Conv", "nodes"]) == {2}
    assert np.isnan(ops.loc[(ops["op_type"] == "Add") & (ops["codegen"] == "opencl"), "ms"]).all()
    best = mix.fastest(ops).set_index("op_type")
    assert best.loc["Conv", ["best", "second"]].tolist() == ["onnxruntime", "opencl"]
    assert best.loc["Conv", "lead"] == pytest.approx(4.5 / 4.0)
    assert best.loc["Relu", ["best", "second"]].tolist() == ["numpy", "opencl"]
    assert best.loc["Relu", "lead"] == pytest.approx(2.0)
    assert best.loc["Add", "second"] == "onnxruntime"  # not the target that cannot run it
    # only one codegen can run it: no lead
    alone = mix.fastest(ops[(ops["op_type"] != "Add") | (ops["codegen"] == "opencl")].fillna(1.0))
    assert np.isnan(alone.set_index("op_type").loc["Add", "lead"])
    assert mix.lead_text(np.nan) == "only" and mix.lead_text(1.125) == "1.1x"
    # priced at nothing (quicker than the launch it was timed with): an endless lead
    free = ops.copy()
    free.loc[(free["op_type"] == "Relu") & (free["codegen"] == "numpy"), "ms"] = 0.0
    free = mix.fastest(free)
    assert free.set_index("op_type").loc["Relu", "lead"] == np.inf and mix.lead_text(np.inf) == "∞"


def test_only_whole_device_targets_of_the_compared_codegens_are_kept(mix: ModuleType) -> None:
    specs = ["opencl:0/1@opencl", "opencl:0@opencl", "cpu/0@onnxruntime", "cpu@openvino",
             "cpu@onnxruntime", "cpu@numpy"]  # fmt: skip
    kept = mix.whole_targets([VirtualDevice.parse(s) for s in specs])
    assert [str(t) for t in kept] == [
        "cpu@numpy", "cpu@onnxruntime", "cpu@openvino", "opencl:0@opencl",
    ]  # fmt: skip


def _bench_rows() -> pd.DataFrame:
    """Two models as `autopart bench --csv` writes them: a mixed tuned plan and a single one."""
    columns = ["model", "plan", "kind", "target", "median_ms", "partitions", "codegens"]
    rows = [
        ("a", "onnxruntime alone", "peer", "", 10.0, 1, ""),
        ("a", "openvino alone", "peer", "", 9.0, 1, ""),
        ("a", "single:cpu@onnxruntime", "single", "cpu@onnxruntime", 8.0, 1, "onnxruntime"),
        ("a", "single:cpu/0@onnxruntime", "single", "cpu/0@onnxruntime", 12.0, 1, "onnxruntime"),
        ("a", "single:opencl:0@opencl", "single", "opencl:0@opencl", 11.0, 1, "opencl"),
        ("a", "heft", "heft", "", 7.0, 5, "onnxruntime+opencl"),
        ("a", "autopart (tuned)", "chosen", "", 6.0, 5, "onnxruntime+opencl"),
        ("m/b.onnx", "onnxruntime alone", "peer", "", 2.0, 1, ""),
        ("m/b.onnx", "single:cpu@numpy", "single", "cpu@numpy", 3.0, 1, "numpy"),
        ("m/b.onnx", "single:cpu/1@onnxruntime", "single", "cpu/1@onnxruntime", 1.5, 1,
         "onnxruntime"),
        ("m/b.onnx", "autopart (tuned)", "chosen", "", 1.5, 1, "onnxruntime"),
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def test_the_collage_table_sets_the_best_single_target_against_the_tuned_plan(
    mix: ModuleType, tmp_path: Path
) -> None:
    path = tmp_path / "bench.csv"
    _bench_rows().assign(vs_best_single=1.0).to_csv(path, index=False)
    table = mix.collage(mix.read_bench(path)).set_index("model")
    a, b = table.loc["a"], table.loc["m/b.onnx"]
    assert (a["best_single"], a["best_single_ms"], a["tuned_ms"]) == ("cpu@onnxruntime", 8.0, 6.0)
    assert a["mix"] and a["tuned_codegens"] == "onnxruntime+opencl" and a["partitions"] == 5
    assert a["tuned_vs_single"] == pytest.approx(0.75)
    assert (a["best_peer_ms"], a["tuned_vs_peer"]) == (9.0, pytest.approx(6.0 / 9.0))
    assert b["best_single"] == "cpu/1@onnxruntime" and not b["mix"]
    assert b["tuned_vs_single"] == pytest.approx(1.0) and b["partitions"] == 1
    assert mix.model_label("m/b.onnx") == "b" and mix.model_label("a") == "a"


def test_a_bench_table_without_the_codegens_column_is_refused_in_one_line(
    mix: ModuleType, tmp_path: Path
) -> None:
    path = tmp_path / "old.csv"
    _bench_rows().drop(columns=["codegens", "kind"]).to_csv(path, index=False)
    with pytest.raises(SystemExit, match=r"lacks the column\(s\) kind, codegens.*run it again"):
        mix.read_bench(path)


def test_the_heatmap_colours_each_cell_by_its_fastest_codegen(mix: ModuleType) -> None:
    costs = _costs()
    ops = pd.concat([mix.op_type_costs("x", costs), mix.op_type_costs("y/z.onnx", costs)])
    ops = ops[(ops["model"] == "x") | (ops["op_type"] != "Relu")]  # z has no Relu
    figure = mix.plot(mix.fastest(ops), ["x", "y/z.onnx"])
    axes = figure.axes[0]
    codes = axes.images[0].get_array()
    rows = [label.get_text() for label in axes.get_yticklabels()]
    assert rows == ["Conv", "Add", "Relu"]  # heaviest first, by summed best time
    assert [label.get_text() for label in axes.get_xticklabels()] == ["x", "z"]
    onnxruntime, numpy = mix.CODEGENS.index("onnxruntime"), mix.CODEGENS.index("numpy")
    assert codes[0].tolist() == [onnxruntime, onnxruntime] and codes[1].tolist() == [numpy] * 2
    assert codes.mask[2].tolist() == [False, True]
    assert {text.get_text() for text in axes.texts} == {"1.1x", "2.0x"}
    assert [t.get_text() for t in axes.get_legend().get_texts()] == ["numpy", "onnxruntime"]


def test_the_mixing_ceiling_puts_every_node_on_its_cheapest_target_for_free(
    mix: ModuleType,
) -> None:
    ceiling = mix.mixing_ceiling("tiny", _costs())
    # only numpy (8.5 ms) and onnxruntime (5.1 ms) run every node; per node the cheapest
    # are opencl 1.0, onnxruntime 2.0, numpy 0.2 and numpy 0.3
    assert ceiling["single_ms"] == pytest.approx(5.1)
    assert ceiling["per_op_ms"] == pytest.approx(3.5)
    assert ceiling["ceiling"] == pytest.approx(3.5 / 5.1)
