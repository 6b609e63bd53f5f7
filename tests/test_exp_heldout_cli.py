"""experiments/exp_heldout_cli.py's command lines: each parses as the CLI's own (nothing runs)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from autopart.cli import main
from autopart.cli.common import parse_freeze, parse_input_shapes
from tests.experiment_import import import_experiment


@pytest.fixture(scope="module")
def cli_experiment() -> ModuleType:
    """The experiment's module, imported as its script would be (from ``experiments/``)."""
    return import_experiment("exp_heldout_cli")


def test_every_held_out_models_steps_parse_with_its_shapes_and_freezes(
    cli_experiment: ModuleType, tmp_path: Path
) -> None:
    suite = import_experiment("heldout.suite").load_suite()
    assert len(suite.models) >= 12
    for model in suite.models:
        steps = cli_experiment.commands(model, "cpu@onnxruntime", 2, None, tmp_path)
        assert list(steps) == list(cli_experiment.STEPS)
        for step, argv in steps.items():
            command = main.get_command(main.make_context("autopart", [step]), step)
            assert command is not None
            parsed = command.make_context(step, list(argv[1:])).params
            assert parse_input_shapes(parsed["input_shapes"]) == dict(model.input_shapes)
            assert parse_freeze(parsed["freeze"]) == dict(model.freeze)
        assert "--check" in steps["run"]
        if model.name == "silero_vad":
            assert {"--freeze", "sr=16000", "input=1,512"} <= set(steps["tune"])
