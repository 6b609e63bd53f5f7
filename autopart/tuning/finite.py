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
from autopart.ir.feeds import is_float, random_inputs
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
    names = ", ".join(graph.inputs[:6]) + (" ..." if len(graph.inputs) > 6 else "")
    raise InputError(
        f"the f32 reference computes NaN or no finite value in {shown} on {inputs}, so no "
        f"output error can be measured; give real inputs with --inputs, or fix inputs that "
        f"set thresholds, sizes or rates with --freeze (the model's inputs: {names})"
    )


def check_seeded_reference(graph: Graph, seed: int) -> None:
    """:func:`check_reference_finite` on the reference run on the seeded random inputs."""
    reference = Executor(graph).run(random_inputs(graph, seed)).outputs
    check_reference_finite(graph, reference, "the seeded random inputs")
