"""`autopart run` with assignments and plans, and `autopart devices`, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.test_errors import assert_one_line_error, invoke


def test_devices_lists_targets_and_fingerprint() -> None:
    code, output = invoke("devices")
    assert code == 0, output
    assert "cpu@numpy" in output and "machine fingerprint:" in output
    again = invoke("devices")[1]
    assert output.splitlines()[-1] == again.splitlines()[-1]  # the fingerprint is stable


def test_assign_save_plan_run_plan_and_check(tmp_path: Path) -> None:
    plan_path, out = tmp_path / "plan.json", tmp_path / "out.npz"
    code, output = invoke(
        "run", "squeezenet", "--assign", "Conv#1-10=cpu/0@onnxruntime", "--assign",
        "MaxPool=cpu/1@onnxruntime", "--save-plan", str(plan_path), "--repeat", "1", "--check",
    )  # fmt: skip
    assert code == 0, output
    assert "(ok)" in output and plan_path.exists()
    document = json.loads(plan_path.read_text())
    assert {"cpu"} == set(document["tree"]) and {"*", "0", "1"} == set(document["tree"]["cpu"])
    code, output = invoke("run", str(plan_path), "--repeat", "1", "--check", "--out", str(out))
    assert code == 0, output
    assert np.load(out)["softmaxout_1"].shape == (1, 1000, 1, 1)


def test_check_uses_an_oracle_independent_of_the_run(tmp_path: Path) -> None:
    """numpy is checked against onnxruntime, onnxruntime alone against numpy; never itself."""
    code, output = invoke("run", "squeezenet", "--repeat", "1", "--check")
    assert code == 0, output
    assert "check against onnxruntime (whole model)" in output and "(ok)" in output
    error = float(output.split("max relative error ")[1].split()[0])
    assert 0.0 < error < 1e-3  # two libraries never agree to the last bit on a real CNN
    code, output = invoke(
        "run", "squeezenet", "--fallback", "cpu@onnxruntime", "--repeat", "1", "--check"
    )
    assert code == 0, output
    assert "check against the numpy reference" in output and "(ok)" in output


def test_check_refuses_to_compare_the_reference_with_itself() -> None:
    from autopart import api
    from autopart.errors import AutopartError
    from autopart.ir.feeds import random_inputs
    from autopart.tuning.oracle import oracle_outputs

    plan, graph = api.make_plan("squeezenet", fallback="cpu@numpy")
    feeds = random_inputs(graph, 0)
    name, _ = oracle_outputs(graph, feeds, plan)
    assert name.startswith("onnxruntime")
    graph.nodes[0].op_type = "NoSuchOp"  # onnxruntime cannot run it now ...
    graph.meta.pop("source")  # ... nor the file, which this edited graph no longer is
    with pytest.raises(AutopartError, match="no independent oracle"):
        oracle_outputs(graph, feeds, plan)


def test_absent_device_lists_what_exists() -> None:
    assert_one_line_error(
        *invoke("run", "squeezenet", "--assign", "Conv=gpu:3@opencl"),
        "no device 'gpu:3'",
        "devices: cpu",
    )


def test_absent_unit_and_codegen(tmp_path: Path) -> None:
    assert_one_line_error(
        *invoke("run", "squeezenet", "--assign", "Conv=cpu/9@onnxruntime"), "no unit 9", "cpu/0"
    )
    assert_one_line_error(
        *invoke("run", "squeezenet", "--fallback", "cpu@tvm"), "unknown codegen 'tvm'", "numpy"
    )


def test_plan_for_another_model_is_refused(tmp_path: Path) -> None:
    plan_path = tmp_path / "plan.json"
    assert invoke("run", "squeezenet", "--save-plan", str(plan_path), "--repeat", "1")[0] == 0
    document = json.loads(plan_path.read_text())
    document["model"]["source"] = "inception_v1"
    del document["check"]  # edited by hand
    plan_path.write_text(json.dumps(document))
    assert_one_line_error(*invoke("run", str(plan_path)), "not this one")


def test_tampered_and_corrupt_plans_are_refused(tmp_path: Path) -> None:
    plan_path = tmp_path / "plan.json"
    assert (
        invoke(
            "run",
            "squeezenet",
            "--assign",
            "Relu=cpu/0@onnxruntime",
            "--save-plan",
            str(plan_path),
            "--repeat",
            "1",
        )[0]
        == 0
    )
    document = json.loads(plan_path.read_text())
    document["partitions"][0]["nodes"].append(document["partitions"][1]["nodes"][0])
    plan_path.write_text(json.dumps(document))
    assert_one_line_error(*invoke("run", str(plan_path)), str(plan_path), "is damaged")
    del document["check"]  # edited by hand: checked against the model instead
    plan_path.write_text(json.dumps(document))
    assert_one_line_error(*invoke("run", str(plan_path)), "node '")
    plan_path.write_text(plan_path.read_text()[:100])
    assert_one_line_error(*invoke("run", str(plan_path)), "not a readable plan")


def test_the_fingerprint_ignores_facts_that_drift_while_the_machine_runs() -> None:
    from autopart.targets.devices import VOLATILE_FACTS, Machine, discover

    machine = discover()
    before = machine.fingerprint()

    class Drifting:
        def __init__(self, device: object, memory: int) -> None:
            self.device, self.memory = device, memory

        def describe(self) -> dict[str, object]:
            return {**self.device.describe(), "global_memory": self.memory}  # type: ignore[attr-defined]

    for memory in (8 << 30, 14 << 30):  # PoCL's global memory follows the free memory
        drifting = {n: Drifting(d, memory) for n, d in machine.devices.items()}
        assert Machine(drifting).fingerprint() == before  # type: ignore[arg-type]
    assert "global_memory" in VOLATILE_FACTS
    renamed = {n: Drifting(d, 0) for n, d in machine.devices.items()}
    renamed["extra"] = renamed["cpu"]
    assert Machine(renamed).fingerprint() != before  # type: ignore[arg-type]


def test_tables_printed_to_a_pipe_keep_their_natural_width(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Piped (a log, CI), rich would assume 80 columns and wrap every cell of a wide table."""
    from rich.table import Table

    from autopart.cli import print_table

    table = Table("plan", "predicted", "measured", "peak memory")
    table.add_row(
        "single:opencl:0/1@opencl *", "12.34 ms", "12.50 ms", "cpu 1.2 MiB, opencl:0 3.4 MiB"
    )
    print_table(table)
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) > 80
    assert any(
        "single:opencl:0/1@opencl *" in line and "opencl:0 3.4 MiB" in line for line in lines
    )
