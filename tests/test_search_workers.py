"""Search workers sharing one optuna study: on SQLite and on a real PostgreSQL server.

Each worker is a separate ``autopart tune`` process planning from a profile of another
machine (so nothing runs but the search). PostgreSQL comes from Debian's package; the test
starts its own server (``tests/pg_server.py``) and skips, saying why, where there is none.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import optuna
import pytest
from onnx import TensorProto, helper, numpy_helper

from autopart import api
from tests.conftest import make_model
from tests.pg_server import postgres_server, unavailable_reason
from tests.test_profile import FAST

ROOT = Path(__file__).parent.parent
TARGETS = ["cpu@numpy", "cpu@onnxruntime", "cpu/0@onnxruntime", "cpu/1@onnxruntime"]


def branchy_cnn() -> onnx.ModelProto:
    """Three convolution branches joined by Adds: a model whose makespan units can share."""
    rng = np.random.default_rng(1)
    weights, nodes = [], []
    for branch in range(3):
        source = "x"
        for depth in range(2):
            name = f"w{branch}{depth}"
            weights.append(
                numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), name)
            )
            out = f"b{branch}_{depth}"
            nodes.append(helper.make_node("Conv", [source, name], [out], name=f"conv{branch}{depth}",
                                          pads=[1, 1, 1, 1]))  # fmt: skip
            nodes.append(helper.make_node("Relu", [out], [f"{out}r"], name=f"relu{branch}{depth}"))
            source = f"{out}r"
    nodes.append(helper.make_node("Add", ["b0_1r", "b1_1r"], ["s"], name="add0"))
    nodes.append(helper.make_node("Add", ["s", "b2_1r"], ["y"], name="add1"))
    graph = helper.make_graph(
        nodes,
        "branchy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        weights,
    )
    return make_model(graph, 13)


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The model, and its profile re-labelled as another machine's (so tune only plans)."""
    folder = tmp_path_factory.mktemp("workers")
    model = folder / "branchy.onnx"
    onnx.save(branchy_cnn(), str(model))
    _, profile, _ = api.profile(str(model), TARGETS, folder / "profiles", settings=FAST)
    profile.meta["fingerprint"] = "another-machine"
    foreign = folder / "another-machine.csv"
    profile.save(foreign)
    return model, foreign


def _worker(
    model: Path, profile: Path, storage: str, folder: Path, index: int, budget: float
) -> subprocess.Popen[str]:
    args = [
        sys.executable, "-m", "autopart.cli", "tune", str(model), "--profile", str(profile),
        "--search", "optuna", "--objective", "makespan", "--storage", storage,
        "--budget", str(budget), "--seed", str(index), "--search-dir", str(folder / f"s{index}"),
        "-o", str(folder / f"plan{index}.json"),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=folder)  # fmt: skip


def _finished(storage: str) -> dict[int, float]:
    """Every finished trial of the one study in ``storage``: number -> makespan."""
    (name,) = optuna.get_all_study_names(storage)
    study = optuna.load_study(study_name=name, storage=storage)
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return {trial.number: float(trial.value) for trial in done if trial.value is not None}


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with postgres_server() as url:
        yield url


def _sqlite(folder: Path) -> str:
    return f"sqlite:///{folder / 'study.db'}"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_workers_started_together_on_a_new_study_all_succeed(
    backend: str, planned: tuple[Path, Path], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    model, profile = planned
    storage = _sqlite(tmp_path) if backend == "sqlite" else request.getfixturevalue("postgres")
    if backend == "postgresql":  # a database of its own, new for this test
        import psycopg

        with psycopg.connect(storage, autocommit=True) as connection:
            connection.execute("CREATE DATABASE together")
        storage = storage.rsplit("/", 1)[0] + "/together"
    workers = [_worker(model, profile, storage, tmp_path, i, budget=2.0) for i in range(4)]
    outputs = [worker.communicate(timeout=300)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0] * 4, outputs
    assert len(_finished(storage)) >= 4


@pytest.mark.slow  # 20 s: four workers, one killed mid-study
def test_a_killed_worker_loses_no_finished_trial_and_the_pick_is_the_best_stored(
    planned: tuple[Path, Path], tmp_path: Path, postgres: str
) -> None:
    model, profile = planned
    workers = [_worker(model, profile, postgres, tmp_path, i, budget=10.0) for i in range(4)]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until the victim has stored trials
        time.sleep(0.5)
        try:
            if len(_finished(postgres)) >= 20:
                break
        except (ValueError, KeyError, optuna.exceptions.StorageInternalError):
            continue
    workers[0].send_signal(signal.SIGKILL)
    workers[0].wait(timeout=60)
    before = _finished(postgres)
    outputs = [worker.communicate(timeout=300)[0] for worker in workers[1:]]
    assert [worker.returncode for worker in workers[1:]] == [0] * 3, outputs
    after = _finished(postgres)
    assert {n: after.get(n) for n in before} == before  # every finished trial kept, as it was
    # a single worker picking from the same trials (its own few added) picks the best stored
    single = _worker(model, profile, postgres, tmp_path, 9, budget=0.5)
    output = single.communicate(timeout=300)[0]
    assert single.returncode == 0, output
    best = min(_finished(postgres).values())
    chosen = json.loads((tmp_path / "plan9.json").read_text())["predicted"]["makespan_s"]
    assert chosen == pytest.approx(best, rel=1e-9)
