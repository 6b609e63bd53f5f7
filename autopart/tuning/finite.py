"""The reference must give finite answers before any error is measured against it.

An output error is measured against the f32 reference on the same inputs. Where the
reference itself computes NaN on them (random values fed to a scalar threshold, a sample
rate or a log), every error is meaningless and no tolerance can be set from one: a tune or
bench stops before measuring and says which outputs, and how to give inputs that mean
something. An output with some infinities among finite values (a mask of ``-inf``) is a
real answer; one with no finite value at all is not.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from autopart.errors import InputError
from autopart.ir.feeds import controlling_inputs, is_float, random_inputs, scalar_inputs
from autopart.ir.graph import Graph
from autopart.runtime.executor import Executor


def meaningless_outputs(outputs: Mapping[str, np.ndarray]) -> list[str]:
    """The float outputs holding a NaN, or no finite value at all (empty ones are fine)."""
    bad = []
    for name, value in outputs.items():
        array = np.asarray(value)
        if array.size == 0 or not is_float(array.dtype):
            continue
        wide = array.astype(np.float64, copy=False)
        if np.isnan(wide).any() or not np.isfinite(wide).any():
            bad.append(name)
    return bad


def check_reference_finite(graph: Graph, outputs: Mapping[str, np.ndarray], inputs: str) -> None:
    """Raise :class:`InputError` if the reference's ``outputs`` on ``inputs`` are meaningless.

    ``inputs`` says which inputs they were (``"the seeded random inputs"``); the one-line
    message names the outputs and the model's inputs, and suggests ``--inputs`` or
    ``--freeze``.
    """
    bad = meaningless_outputs(outputs)
    if not bad:
        return
    shown = ", ".join(bad[:4]) + (f" and {len(bad) - 4} more" if len(bad) > 4 else "")
    controls = list(dict.fromkeys([*controlling_inputs(graph), *scalar_inputs(graph)]))
    if controls:
        fix = "fix the scalar inputs that set sizes, thresholds or rates with --freeze"
        names = ", ".join(f"{name}=VALUE" for name in controls[:4])
        hint = f"{fix} ({names})"
    else:
        listed = ", ".join(graph.inputs[:6]) + (" ..." if len(graph.inputs) > 6 else "")
        hint = f"or fix inputs that set thresholds, sizes or rates with --freeze ({listed})"
    raise InputError(
        f"the f32 reference computes NaN or no finite value in {shown} on {inputs}, so no "
        f"output error can be measured; give real inputs with --inputs, {hint}"
    )


def check_seeded_reference(graph: Graph, seed: int) -> None:
    """:func:`check_reference_finite` on the reference run on the seeded random inputs."""
    reference = Executor(graph).run(random_inputs(graph, seed)).outputs
    check_reference_finite(graph, reference, "the seeded random inputs")


def stand_in_notes(graph: Graph) -> list[str]:
    """The note that random values stood in for scalar inputs that set sizes or thresholds."""
    controls = controlling_inputs(graph)
    if not controls:
        return []
    fixes = " ".join(f"--freeze {name}=VALUE" for name in controls[:4])
    return [
        f"{', '.join(controls)} set sizes, thresholds or rates, and seeded random values "
        f"stood in for them while timing and checking: fix them with {fixes}"
    ]
