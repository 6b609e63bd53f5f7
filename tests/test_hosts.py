"""Hosts: the target grammar's host level, the network model, and clusters on Ray."""

from __future__ import annotations

import itertools
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.cli import main
from autopart.costmodel.network import (
    Link,
    NetworkModel,
    Regime,
    fit_link,
    load_network,
    network_path,
    save_network,
)
from autopart.errors import ProfileError
from autopart.ir import Graph, Node, Value
from autopart.plan.schema import PlanError
from autopart.runtime.hosts import StreamResult, cut_stages, host_of
from tests.test_profile import tiny_cnn

SIZES = [1000 * 4**k for k in range(8)] + [64_000_000]


SPLIT = 100 * 1024


@settings(max_examples=60, deadline=None)
@given(
    small=st.tuples(st.floats(1e-6, 1e-2), st.floats(1e7, 1e11)),
    large=st.tuples(st.floats(1e-6, 1e-2), st.floats(1e7, 1e11)),
    noise=st.lists(st.floats(-0.05, 0.05), min_size=len(SIZES), max_size=len(SIZES)),
)
def test_a_fitted_link_predicts_every_size_within_its_noise_in_each_regime(
    small: tuple[float, float], large: tuple[float, float], noise: list[float]
) -> None:
    truth = Link((Regime(SPLIT, *small), Regime(math.inf, *large)))
    times = [truth.seconds(n) * (1 + e) for n, e in zip(SIZES, noise, strict=True)]
    fitted = fit_link(SIZES, times, [5] * len(SIZES), [SPLIT])
    assert [r.upto_bytes for r in fitted.regimes] == [SPLIT, math.inf]
    assert fitted.worst_error() <= 0.12  # relative residuals: small sizes count as large
    for nbytes in SIZES:
        assert fitted.seconds(nbytes) == pytest.approx(truth.seconds(nbytes), rel=0.12)
    assert [row[2] for row in fitted.measured] == [5] * len(SIZES)
    one = fit_link(SIZES, [Link.simple(*large).seconds(n) for n in SIZES])
    assert one.seconds(SIZES[-1]) == pytest.approx(Link.simple(*large).seconds(SIZES[-1]))


def test_a_regime_of_fewer_than_two_sizes_joins_its_neighbour() -> None:
    sizes = [1000, 2000, 4000, 8000]
    times = [1e-3 + n / 1e9 for n in sizes]
    assert [r.upto_bytes for r in fit_link(sizes, times, splits=[1000]).regimes] == [math.inf]
    assert [r.upto_bytes for r in fit_link(sizes, times, splits=[2000]).regimes] == [
        2000,
        math.inf,
    ]
    assert [r.upto_bytes for r in fit_link(sizes, times, splits=[5000]).regimes] == [math.inf]


def test_a_link_needs_two_sizes_and_positive_times() -> None:
    with pytest.raises(ValueError, match="two sizes"):
        fit_link([1000, 1000], [1e-3, 1e-3])
    with pytest.raises(ValueError, match="positive"):
        fit_link([1000, 2000], [1e-3, 0.0])
    with pytest.raises(ValueError, match="bandwidth"):
        Link.simple(1e-3, 0.0)
    with pytest.raises(ValueError, match="unbounded"):
        Link((Regime(1000, 1e-3, 1e9),))


def test_the_network_model_round_trips_and_refuses_a_damaged_file(tmp_path: Path) -> None:
    link = fit_link(SIZES, [1e-4 + n / 2e9 for n in SIZES], [3] * len(SIZES))
    model = NetworkModel({("host0", "host1"): link}, {"host0": "aa", "host1": "bb"})
    path = network_path(tmp_path, model.hosts)
    assert path == network_path(tmp_path, {"host1": "bb", "host0": "aa"})
    save_network(model, path)
    again = load_network(path)
    assert again == model
    assert again.seconds("host1", "host0", 1e6) == link.seconds(1e6)  # the reverse stands in
    assert again.seconds("host0", "host0", 1e9) == 0.0
    with pytest.raises(ProfileError, match="no link"):
        again.seconds("host0", "host2", 1)
    document = json.loads(path.read_text())
    document["links"][0]["regimes"][0]["bytes_per_s"] = -1
    path.write_text(json.dumps(document))
    with pytest.raises(ProfileError, match="damaged"):
        load_network(path)
    path.write_text('{"format": "autopart.profile 4"}')
    with pytest.raises(ProfileError, match="not a network model"):
        load_network(path)
    path.write_text("{")
    with pytest.raises(ProfileError, match="cannot read"):
        load_network(path)


def test_without_ray_a_cluster_is_one_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    result = CliRunner().invoke(main, ["devices", "--cluster", "local:2"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: Ray is not installed: pip install -e '.[ray]' (or pip install ray) to use --cluster"
    ]


@pytest.mark.parametrize("spec", ["local:0", "local:999"])
def test_a_local_cluster_beyond_the_cores_is_one_error_line(spec: str) -> None:
    pytest.importorskip("ray")
    result = CliRunner().invoke(main, ["devices", "--cluster", spec])
    assert result.exit_code == 2 and result.output.startswith("error: --cluster local:")
    assert len(result.output.strip().splitlines()) == 1


def _two_cores() -> None:
    import os

    pytest.importorskip("ray")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("a local:2 cluster needs 2 cores")


def chosen_rows(output: str) -> list[str]:
    """The lines of a hosts tune's table marked chosen (``*``, padded to its column)."""
    return [line for line in output.splitlines() if re.search(r" \* +│", line)]


@pytest.mark.slow  # starts a Ray cluster: 13-20 s
def test_devices_of_a_local_cluster_are_found_on_each_host_with_its_own_core() -> None:
    _two_cores()
    result = CliRunner().invoke(main, ["devices", "--cluster", "local:2"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│ host")]
    assert [row.split("│")[1].strip() for row in rows if "│ cpu " in row] == ["host0", "host1"]
    assert all(row.split("│")[5].strip() == "cpu/0" for row in rows if "│ cpu " in row)
    assert "host1 targets: host1:cpu@numpy" in result.output
    prints = [line.split()[-1] for line in result.output.splitlines() if "fingerprint:" in line]
    assert len(prints) == 2 and all(len(p) == 16 for p in prints)


@pytest.mark.slow  # starts a Ray cluster: 13-20 s
def test_the_network_command_times_fits_and_saves_each_link(tmp_path: Path) -> None:
    _two_cores()
    result = CliRunner().invoke(
        main, ["network", "--cluster", "local:2", "--runs", "2", "--profiles", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    (saved,) = tmp_path.glob("network-*.json")
    model = load_network(saved)
    assert set(model.links) == {(a, b) for a in ("host0", "host1") for b in ("host0", "host1")}
    assert set(model.hosts) == {"host0", "host1"}
    for link in model.links.values():
        assert [row[0] for row in link.measured] == SIZES
        assert all(row[1] > 0 and row[2] >= 2 for row in link.measured)
        assert np.isfinite(link.latency_s) and link.bytes_per_s > 0
    flat = result.output.replace("\n", "")  # rich wraps long lines
    assert re.search(r"host0 -> host1: (all sizes|up to [\d,]+ bytes): latency", flat)
    assert f"saved: {saved}" in flat
    # both hosts share this machine: timed streaming alone and together, at two input times
    sharing = model.sharing
    assert sharing is not None and sharing.hosts == ("host0", "host1")
    (quick, _), (slow, _) = sharing.measured
    assert 0 < quick < slow and all(0 < e < 1.5 for _, e in sharing.measured)
    assert re.search(r"host0, host1 share this machine: .* at \d+% ?of its core", flat)


def _random_dag(seed: int, count: int) -> Graph:
    rng = np.random.default_rng(seed)
    values = {"x": Value("x", (8,), np.dtype(np.float32))}
    nodes = []
    for i in range(count):
        pool = ["x", *(f"v{j}" for j in range(i))]
        picks = sorted({str(rng.choice(pool)) for _ in range(int(rng.integers(1, 4)))})
        values[f"v{i}"] = Value(f"v{i}", (8,), np.dtype(np.float32))
        nodes.append(Node(f"n{i}", "Sum" if len(picks) > 1 else "Relu", picks, [f"v{i}"]))
    used = {name for node in nodes for name in node.inputs}
    outputs = [f"v{i}" for i in range(count) if f"v{i}" not in used]
    return Graph("random", nodes, values, ["x"], outputs, {"": 17})


@settings(max_examples=60, deadline=None)
@given(
    replicas=st.integers(1, 4),
    rounds=st.integers(2, 30),
    latency=st.floats(1e-3, 1.0),
    period=st.floats(1e-3, 1.0),
)
def test_a_stream_is_rated_once_full_whatever_its_fill(
    replicas: int, rounds: int, latency: float, period: float
) -> None:
    """Replicas that each take ``period`` an input, the first back a whole ``latency`` in:
    the rate is the replicas' steady one however long the fill; a stream too short for
    it is rated over its whole time."""
    finished = [latency + period * r for r in range(rounds) for _ in range(replicas)]
    seconds = finished[-1]
    result = StreamResult([latency] * len(finished), seconds, finished=finished, filling=replicas)
    assert result.rate == pytest.approx(replicas / period)
    short = StreamResult(
        [latency] * replicas, latency, finished=finished[:replicas], filling=replicas
    )
    assert short.rate == pytest.approx(replicas / latency)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 30), hosts=st.integers(1, 3))
def test_stages_cover_the_graph_in_order_and_hand_on_every_value_read_later(
    seed: int, count: int, hosts: int
) -> None:
    graph = _random_dag(seed, count)
    rng = np.random.default_rng(seed + 1)
    assignment = {
        node.name: f"host{int(rng.integers(hosts))}:cpu@numpy".removeprefix("host0:")
        for node in graph.nodes
    }
    stages = cut_stages(graph, assignment)
    assert [name for s in stages for name in s.nodes] == [node.name for node in graph.nodes]
    assert all(a.host != b.host for a, b in itertools.pairwise(stages))
    available = set(graph.inputs)
    for stage in stages:
        assert {host_of(assignment[name]) for name in stage.nodes} == {stage.host}
        assert set(stage.inputs) <= available  # read only what came before
        made = {out for name in stage.nodes for out in graph.node(name).outputs}
        assert set(stage.outputs) <= made
        available |= set(stage.outputs)
    assert set(graph.outputs) <= available


@pytest.mark.slow
def test_a_plan_split_across_hosts_runs_there_and_matches_onnxruntime(tmp_path: Path) -> None:
    _two_cores()
    from autopart import api
    from autopart.cluster.session import cluster
    from autopart.ir.feeds import random_inputs
    from autopart.runtime.hosts import ClusterPlanExecutor
    from autopart.tuning.oracle import oracle_outputs

    plan, graph = api.make_plan(tiny_cnn(), ["idx:1-2=host1:cpu@onnxruntime"], "cpu@numpy")
    bad, _ = api.make_plan(tiny_cnn(), ["idx:1-2=host1:opencl:9@opencl"], "cpu@numpy")
    feeds = [random_inputs(graph, seed) for seed in range(3)]
    with cluster("local:2") as hosts:
        executor = ClusterPlanExecutor(plan, graph, hosts)
        assert [(s.host, len(s.nodes)) for s in executor.stages] == [
            ("host0", 1),
            ("host1", 2),
            ("host0", 1),
        ]  # the last stage reads a value of the first (a skip) and of the second
        run = executor.run(feeds[0], repeat=3)
        streamed = executor.stream(feeds * 4)
        with pytest.raises(PlanError, match=r"host host1, compiling stage s1: .*opencl:9"):
            ClusterPlanExecutor(bad, graph, hosts)
        with pytest.raises(PlanError, match="host1, which the cluster lacks"):
            ClusterPlanExecutor(plan, graph, hosts[:1])
    assert len(run.latencies) == 3 and len(streamed.latencies) == 12 and streamed.rate > 0
    for sample, outputs in [
        (feeds[0], run.outputs),
        *zip(feeds * 4, streamed.outputs, strict=True),
    ]:
        _, expected = oracle_outputs(graph, sample, plan)
        for name, array in expected.items():
            np.testing.assert_allclose(outputs[name], array, rtol=1e-4, atol=1e-5)
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), model)
    split = ["--assign", "idx:1-2=host1:cpu@onnxruntime", "--fallback", "cpu@numpy"]
    result = CliRunner().invoke(main, ["run", str(model), *split, "--cluster", "local:2",
                                       "--check", "--stream", "6"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "stage s1 on host1: 2 nodes" in result.output
    assert "stream of 6 inputs on 2 host(s)" in result.output


def test_a_plan_on_hosts_run_without_a_cluster_is_one_error_line(tmp_path: Path) -> None:
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), model)
    result = CliRunner().invoke(main, ["run", str(model), "--assign", "Relu=host1:cpu@numpy"])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "error: target host1:cpu@numpy is on host host1, not this machine: run it with --cluster"
    )
    result = CliRunner().invoke(main, ["run", str(model), "--stream", "4"])
    assert result.exit_code == 2 and "give --cluster too" in result.output


@pytest.mark.slow
def test_each_host_profiles_itself_once_per_fingerprint_and_reuses_it(tmp_path: Path) -> None:
    _two_cores()
    from autopart import api
    from autopart.profile import Profile

    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), model)
    first = api.profile_hosts(model, "local:2", ["cpu@numpy"], tmp_path / "profiles")
    assert [(p.host, p.shared_with) for p in first] == [("host0", None), ("host1", "host0")]
    assert first[0].fingerprint != api.devices().fingerprint()  # one core of two: its own
    assert first[0].new > 0 and first[0].path.exists()
    saved = Profile.load(first[0].path)
    assert saved.fingerprint == first[0].fingerprint and not saved.dropped.count
    result = CliRunner().invoke(main, ["profile", str(model), "--cluster", "local:2",
                                       "--targets", "cpu@numpy",
                                       "--profiles", str(tmp_path / "profiles")])  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [line.split("│") for line in result.output.splitlines() if line.startswith("│ host")]
    assert [(row[1].strip(), row[3].strip()) for row in rows] == [("host0", "0"), ("host1", "0")]
    assert "shared with host0" in result.output


def test_a_host_profile_that_comes_back_damaged_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    from autopart.tuning.host_profiles import _save_checked

    target = tmp_path / "abc.csv"
    with pytest.raises(ProfileError):
        _save_checked(b"# autopart.profile 4\nnot a profile\n", target, "abc")
    assert not target.exists()


@pytest.mark.slow
def test_tune_across_hosts_splits_a_model_too_big_for_one_and_its_plan_runs_again(
    tmp_path: Path,
) -> None:
    _two_cores()
    from autopart import api

    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), model)
    weights = api.load(model).parameter_bytes()
    plan = tmp_path / "plan.json"
    cap = f"*={int(weights * 0.6)}"  # neither host holds the whole model
    args = ["tune", str(model), "--cluster", "local:2", "--targets", "cpu@numpy,cpu@onnxruntime",
            "--memory", cap, "--budget", "20", "--profiles", str(tmp_path / "profiles"),
            "-o", str(plan)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "by measured latency" in result.output  # quickest or pipeline: both split
    assert "replicas" not in result.output  # no host can hold a replica
    rows = [line for line in result.output.splitlines() if line.startswith("│ quickest")]
    assert rows and "host0:" in rows[0] and "host1:" in rows[0]
    chosen = chosen_rows(result.output)
    assert len(chosen) == 1 and "host0:" in chosen[0] and "host1:" in chosen[0]
    saved = api.load_plan(plan)[0]
    assert {host_of(t) for t in saved.assignment.values()} == {"host0", "host1"}
    again = CliRunner().invoke(main, ["run", str(plan), "--cluster", "local:2", "--check"])
    assert again.exit_code == 0, again.output
    assert "(ok)" in again.output
    refused = CliRunner().invoke(main, ["tune", str(model), "--objective", "throughput"])
    assert refused.exit_code == 2 and "give --cluster" in refused.output
