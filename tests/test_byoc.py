"""Bring your own codegen: the worked example registers, plans, runs and conforms."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import autopart
import autopart.api
from autopart.errors import TargetError
from autopart.runtime import random_inputs
from autopart.targets import registry
from autopart.testing.conformance import CodegenConformance

sys.path.insert(0, str(Path(__file__).parents[1]))
import examples.blas_codegen  # noqa: F401  (registers cpu@blas)


class TestBlasConformance(CodegenConformance):
    target = "cpu@blas"


def test_example_codegen_runs_matrix_products(transformer_path: Path) -> None:
    plan, graph = autopart.api.make_plan(transformer_path, ["MatMul=cpu@blas", "Gemm=cpu@blas"])
    on_blas = {name for p in plan.partitions if p.target == "cpu@blas" for name in p.nodes}
    products = [n for n in graph.nodes if n.op_type in ("MatMul", "Gemm")]
    two_d = {n.name for n in products if len(graph.value(n.inputs[1]).shape or ()) == 2}
    assert on_blas == two_d and len(two_d) < len(products)  # attention products fall back
    assert any("MatMul on cpu@blas is unsupported" in note for note in plan.notes)
    feeds = random_inputs(graph, seed=2)
    result = autopart.api.run_plan(plan, graph, feeds)
    errors = autopart.api.check_outputs(graph, feeds, result.outputs)
    assert max(errors.values()) <= 1e-4


def test_unsupported_nodes_fall_back_with_a_note() -> None:
    plan, _ = autopart.api.make_plan("squeezenet", ["idx:0-3=cpu@blas"])
    assert all(p.target == "cpu@numpy" for p in plan.partitions)
    assert any("fell back to cpu@numpy" in note for note in plan.notes)


def _install_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, body: str
) -> None:
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(body))
    info = tmp_path / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[autopart.codegens]\nmine = {module}:MineCodegen\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.setattr(registry, "_CODEGENS", dict(registry._CODEGENS))


def test_entry_point_plugins_are_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_plugin(
        tmp_path,
        monkeypatch,
        "good_plugin",
        """
        from autopart.targets.numpy.codegen import NumpyCodegen

        class MineCodegen(NumpyCodegen):
            name = "mine"
        """,
    )
    assert "mine" in registry.codegen_names()
    plan, graph = autopart.api.make_plan("squeezenet", ["Relu=cpu@mine"])
    assert any(p.target == "cpu@mine" for p in plan.partitions)
    result = autopart.api.run_plan(plan, graph)
    assert np.isfinite(next(iter(result.outputs.values()))).all()


def test_broken_plugin_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_plugin(tmp_path, monkeypatch, "broken_plugin", "raise RuntimeError('boom')\n")
    with pytest.raises(TargetError, match=r"plugin 'mine'.*boom"):
        registry.codegen_names()
