"""Comparing outputs with an oracle: NaN and infinity where the oracle has them are no error,
anywhere else they always fail; `run --check` exits 1 on a mismatch."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from autopart.settings import COMMON
from autopart.tuning.oracle import relative_error
from tests.test_errors import invoke, tiny_model

run_command = importlib.import_module("autopart.cli.run")  # the package's `run` is the command
ANY_FLOATS = arrays(np.float32, st.integers(1, 20), elements=st.floats(width=32))
FINITE = arrays(np.float64, st.integers(1, 20), elements=st.floats(-1e6, 1e6)).filter(
    lambda a: np.abs(a).max() > 0
)


@given(ANY_FLOATS)
def test_an_output_equal_to_the_oracle_has_no_error_whatever_it_holds(values: np.ndarray) -> None:
    assert relative_error(values.copy(), values) == 0.0


@given(ANY_FLOATS, st.data())
def test_a_nan_or_infinity_the_oracle_lacks_always_fails(
    values: np.ndarray, data: st.DataObject
) -> None:
    finite = np.flatnonzero(np.isfinite(values))
    if not finite.size:
        return
    where = data.draw(st.sampled_from(list(finite)))
    got = values.copy()
    got[where] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    assert relative_error(got, values) == np.inf
    assert relative_error(values, got) == np.inf  # the oracle's NaN, where the run has none


@given(FINITE, st.floats(-1e3, 1e3))
def test_a_finite_error_is_the_largest_difference_over_the_largest_value(
    values: np.ndarray, shift: float
) -> None:
    got = values.copy()
    got[0] += shift
    expected = abs(got[0] - values[0]) / np.abs(values).max()
    assert relative_error(got, values) == pytest.approx(expected, rel=1e-9, abs=1e-300)


@given(
    arrays(
        np.float32, st.tuples(st.integers(0, 4), st.integers(1, 3)), elements=st.floats(width=32)
    ),
    arrays(
        np.float32, st.tuples(st.integers(0, 4), st.integers(1, 3)), elements=st.floats(width=32)
    ),
)
def test_outputs_of_another_shape_differ_wholly_and_never_raise(
    got: np.ndarray, expected: np.ndarray
) -> None:
    """A detector's outputs may keep another count of boxes on another target: an output
    whose shape is not the reference's is an infinite error, not an exception."""
    if got.shape == expected.shape:
        return
    assert relative_error(got, expected) == np.inf


def test_run_check_agrees_on_nans_and_exits_1_on_a_mismatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.onnx"
    onnx.save(tiny_model(["Log"]), str(path))  # NaN for each negative input, in both
    code, output = invoke("run", str(path), "--check", "--repeat", "1")
    assert code == 0 and "(ok)" in output, output
    oracle = run_command.oracle_outputs

    def off(*args: object) -> tuple[str, dict[str, np.ndarray]]:  # an oracle that disagrees
        name, outputs = oracle(*args)  # type: ignore[arg-type]
        return name, {
            key: value + 10 * COMMON.check_tolerance + 1 for key, value in outputs.items()
        }

    monkeypatch.setattr(run_command, "oracle_outputs", off)
    code, output = invoke("run", str(path), "--check", "--repeat", "1")
    assert code == 1 and "(MISMATCH)" in output, output
    assert "Traceback" not in output and "error:" not in output


@given(
    arrays(np.float32, st.tuples(st.integers(0, 4), st.integers(1, 3)), elements=st.floats(-1, 1)),
    arrays(np.float32, st.tuples(st.integers(0, 4), st.integers(1, 3)), elements=st.floats(-1, 1)),
)
def test_a_sensitivity_run_of_another_output_shape_is_an_infinite_error(
    got: np.ndarray, expected: np.ndarray
) -> None:
    """Reduced precision on some nodes may change a detector's count of boxes: the
    sensitivities' error is then infinite, never a broadcasting ValueError."""
    from autopart.profile.sensitivity import output_error

    if got.shape == expected.shape:
        return
    assert output_error({"boxes": got}, {"boxes": expected}) == np.inf
