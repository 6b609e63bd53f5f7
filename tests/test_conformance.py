"""Every built-in codegen passes the conformance suite on every target it offers here.

The targets come from the registry (:func:`~autopart.targets.resolve.available_targets`):
each whole device at every precision its codegens offer on this machine, and one unit per
codegen and device (the last, so that a unit index other than 0 is exercised where there
are several), in f32, to keep the time bounded (int8's class, 44 s, is in the slow tier).
One test class per target is made from
:class:`~autopart.testing.conformance.CodegenConformance`; a codegen this machine cannot
run (no package, no device) has no target and says so in a skipped test. Plugins ship
their own subclass (``tests/test_byoc.py``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from autopart.ir.target import VirtualDevice
from autopart.targets.registry import builtin_codegen_modules, codegen_names, get_codegen
from autopart.targets.resolve import available_targets
from autopart.testing.conformance import CodegenConformance


def builtin(codegen: str) -> bool:
    """Whether ``codegen`` is one of autopart's own (found in a folder of autopart.targets)."""
    return type(get_codegen(codegen)).__module__ in builtin_codegen_modules()


def conformance_targets(targets: Sequence[VirtualDevice]) -> list[VirtualDevice]:
    """Of ``targets``: every whole device at every precision, and each device's last unit
    per codegen in f32, in the order given."""
    chosen = [target for target in targets if target.unit is None]
    last_units: dict[tuple[str | None, str | None], VirtualDevice] = {}
    for target in targets:
        if target.unit is not None and target.precision is None:
            last_units[(target.device, target.codegen)] = target
    return chosen + list(last_units.values())


TARGETS = conformance_targets(
    [t for t in available_targets() if t.codegen is not None and builtin(t.codegen)]
)
for _target in TARGETS:
    _name = "Test_" + re.sub(r"\W+", "_", str(_target)).strip("_")
    _marks = [pytest.mark.slow] if _target.precision == "int8" else []  # 44 s: the slow tier
    globals()[_name] = type(
        _name, (CodegenConformance,), {"target": str(_target), "pytestmark": _marks}
    )


def test_the_conformance_targets_are_whole_devices_at_each_precision_and_one_unit() -> None:
    parse = VirtualDevice.parse
    offered = [
        parse(spec)
        for spec in ("cpu@a", "cpu/0@a", "cpu/1@a", "cpu@a:bf16", "cpu/0@a:bf16", "cpu@b", "x@c")
    ]
    assert [str(t) for t in conformance_targets(offered)] == [
        "cpu@a", "cpu@a:bf16", "cpu@b", "x@c", "cpu/1@a",
    ]  # fmt: skip


@pytest.mark.parametrize("codegen", [name for name in codegen_names() if builtin(name)])
def test_every_builtin_codegen_is_tested_where_it_can_run(codegen: str) -> None:
    tested = {target.codegen for target in TARGETS}
    if codegen not in tested:
        why = "not installed" if not get_codegen(codegen).available() else "no device for it"
        pytest.skip(f"codegen {codegen} has no target on this machine ({why})")
    precisions = {t.computes_in for t in TARGETS if t.codegen == codegen and t.unit is None}
    assert precisions == set(get_codegen(codegen).precisions())


def test_sums_of_products_are_held_to_the_magnitude_their_roundings_scale_with() -> None:
    import numpy as np

    from autopart.testing.cases import single_node_case
    from autopart.testing.conformance import assert_close_reduced, magnitude, reference

    x = np.array([[[[2.0, -2.0, 1.0]]]], np.float32)
    w = np.array([[[[1.0, 1.0, 0.05]]]], np.float32)
    conv = single_node_case("Conv", {}, {"x": x}, {"w": w})
    (out,) = reference(conv).values()
    assert float(out.ravel()[0]) == pytest.approx(0.05)  # 2 - 2 + 0.05: the terms cancel
    assert magnitude(conv) == pytest.approx(4.05)  # 2 + 2 + 0.05
    off_by_a_rounding = out + np.float32(0.01)  # 0.25% of 4.05, 20% of 0.05
    assert_close_reduced(off_by_a_rounding, out, "int8", "conv", magnitude(conv))
    with pytest.raises(AssertionError):
        assert_close_reduced(off_by_a_rounding, out, "int8", "conv")
    relu = single_node_case("Relu", {}, {"x": x})
    assert magnitude(relu) == 0.0  # other ops: relative to their output alone
