"""Hosts lost and links given: killing a Ray node mid-run and mid-tune, --replan, --link."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.cli import main
from autopart.cluster.session import HostLostError, remote_refusal
from autopart.costmodel.network import load_network
from autopart.profile import Profile
from autopart.runtime.hosts import host_of
from autopart.search.constraints import ConstraintError
from autopart.search.hosts import parse_links
from tests.test_profile import tiny_cnn

ROOT = Path(__file__).resolve().parents[1]


def _two_cores() -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("local:2 needs two cores")


@settings(max_examples=40, deadline=None)
@given(
    rate=st.floats(1e3, 1e12),
    latency=st.floats(1e-7, 1.0),
    unit=st.sampled_from([("s", 1.0), ("ms", 1e-3), ("us", 1e-6)]),
    nbytes=st.integers(0, 10**9),
)
def test_a_given_link_prices_both_ways_as_written(
    rate: float, latency: float, unit: tuple[str, float], nbytes: int
) -> None:
    text = f"host0-host1={rate:.0f}/s,{latency / unit[1]:.12f}{unit[0]}"
    model = parse_links([text])
    expected = latency + nbytes / round(rate)
    for a, b in [("host0", "host1"), ("host1", "host0")]:
        assert model.seconds(a, b, nbytes) == pytest.approx(expected, rel=1e-6, abs=1e-12)


def test_link_units_and_malformed_links() -> None:
    model = parse_links(["host0-host1=1.25GB/s,200us", "host1-host2=10MB,2ms"])
    assert model.seconds("host0", "host1", 1_250_000_000) == pytest.approx(1.0002)
    assert model.seconds("host2", "host1", 0) == pytest.approx(2e-3)
    for text in ["host0-host1=1GB/s", "host0=1GB/s,1ms", "host0-host0=1GB,1ms",
                 "host0-host1=fast,1ms", "host0-host1=0GB,1ms", "host0-host1=1GB,1 hour"]:  # fmt: skip
        with pytest.raises(ConstraintError, match="--link"):
            parse_links([text])


def test_a_loss_inside_ray_is_a_lost_host_and_the_codes_own_error_a_refusal() -> None:
    lost = type("ObjectLostError", (Exception,), {"__module__": "ray.exceptions"})("gone")
    wrapped = type("RayTaskError", (Exception,), {"__module__": "ray.exceptions"})()
    wrapped.cause = lost
    assert remote_refusal(wrapped) is None
    wrapped.cause = ValueError("no such op")
    assert remote_refusal(wrapped) == "ValueError: no such op"
    error = HostLostError("host1", "running stage s1", "ActorUnavailableError")
    assert error.host == "host1"
    assert str(error) == "host host1 was lost while running stage s1: ActorUnavailableError"


def test_link_and_replan_need_a_cluster_and_a_malformed_link_starts_none(tmp_path: Path) -> None:
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), model)
    result = CliRunner().invoke(main, ["tune", str(model), "--replan"])
    assert result.exit_code == 2 and "give --cluster too" in result.output
    result = CliRunner().invoke(main, ["tune", str(model), "--link", "host0-host1=1GB,1ms"])
    assert result.exit_code == 2 and "give --cluster too" in result.output
    started = time.perf_counter()
    result = CliRunner().invoke(
        main, ["tune", str(model), "--cluster", "local:2", "--link", "host0-host1=1GB"]
    )
    assert result.exit_code == 2
    assert result.output.strip().startswith("error: malformed --link 'host0-host1=1GB'")
    assert time.perf_counter() - started < 5  # refused before any Ray node started


@pytest.mark.slow
def test_tune_for_a_given_network_predicts_and_runs_nothing(tmp_path: Path) -> None:
    _two_cores()
    from autopart import api

    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), model)
    common = ["tune", str(model), "--cluster", "local:2", "--targets", "cpu@numpy",
              "--objective", "throughput", "--budget", "20",
              "--profiles", str(tmp_path / "profiles")]  # fmt: skip
    slow = tmp_path / "slow.json"
    result = CliRunner().invoke(
        main, [*common, "--link", "host0-host1=1MB/s,500ms", "-o", str(slow)]
    )
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "by predicted throughput" in said and "predicted only, nothing was run" in said
    rows = [line.split("│") for line in result.output.splitlines() if line.startswith("│ ")]
    assert rows and all(row[5].strip() == "-" and row[8].strip() == "-" for row in rows[1:])
    plan = api.load_plan(slow)[0]
    assert any("--link host0-host1=1MB/s,500ms" in note for note in plan.notes)
    # over a link of half a second, no second host pays: the plan stays on host0
    assert {host_of(t) for t in plan.assignment.values()} == {"host0"}
    # hosts a given network links are machines apart: this machine's sharing is not timed
    assert not any("share this machine" in note for note in plan.notes)
    (network,) = (tmp_path / "profiles").glob("network-*.json")
    assert load_network(network).sharing is None
    here = tmp_path / "here.json"  # the network here: the hosts' sharing timed and priced
    result = CliRunner().invoke(main, [*common, "-o", str(here)])
    assert result.exit_code == 0, result.output
    assert load_network(network).sharing is not None
    assert any("host0, host1 share this machine" in n for n in api.load_plan(here)[0].notes)
    unknown = CliRunner().invoke(main, [*common, "--link", "host0-host7=1GB,1ms"])
    assert unknown.exit_code == 2
    assert " ".join(unknown.output.split()) == (
        "error: --link names host7, not a host of the cluster (host0, host1)"
    )


def _kill_host(parent: int, index: int, after_s: float) -> bool:
    """Kill host ``index``'s raylet and its workers (a machine gone), ``after_s`` after it starts.

    The raylet is found among ``parent``'s descendants (a local:N cluster's nodes are the
    command's children). False when the command ended first.
    """
    psutil = pytest.importorskip("psutil")
    deadline = time.monotonic() + 120
    raylet = None
    while raylet is None and time.monotonic() < deadline:
        try:
            family = psutil.Process(parent).children(recursive=True)
        except psutil.NoSuchProcess:
            return False
        for process in family:
            try:
                if process.name() == "raylet" and f"autopart_host_{index}" in " ".join(
                    process.cmdline()
                ):
                    raylet = process
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.1)
    if raylet is None:
        return False
    time.sleep(after_s)
    try:
        workers = raylet.children(recursive=True)
        raylet.kill()
    except psutil.NoSuchProcess:
        return False
    for worker in workers:
        try:
            worker.kill()
        except psutil.NoSuchProcess:
            continue
    return True


def _autopart(args: list[str], kill_after_s: float) -> tuple[int, str, bool]:
    """Run ``python -m autopart ARGS``, killing host1 ``kill_after_s`` after it starts."""
    command = subprocess.Popen(
        [sys.executable, "-m", "autopart", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    killed = _kill_host(command.pid, 1, kill_after_s)
    output, _ = command.communicate(timeout=600)
    return command.returncode, output, killed


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert "Traceback" not in output and len(errors) == 1, output
    assert lines[-1] == errors[0], output
    return errors[0]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_killing_a_host_mid_run_is_one_error_line_naming_it(tmp_path: Path, seed: int) -> None:
    _two_cores()
    from autopart import api

    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), model)
    plan = tmp_path / "plan.json"
    api.make_plan(str(model), ["idx:1-2=host1:cpu@numpy"], "cpu@numpy")[0].save(plan)
    before = plan.read_bytes()
    moment = random.Random(seed).uniform(2.0, 6.0)
    code, output, killed = _autopart(
        ["run", str(plan), "--cluster", "local:2", "--stream", "5000"], moment
    )
    assert killed, output
    assert code == 2, output
    line = _one_error_line(output)
    assert line.startswith("error: host host1 was lost while "), line
    assert plan.read_bytes() == before


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 5])
def test_killing_a_host_mid_tune_keeps_disk_whole_and_replan_finishes(
    tmp_path: Path, seed: int
) -> None:
    _two_cores()
    from autopart import api

    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), model)
    profiles, plan = tmp_path / "profiles", tmp_path / "plan.json"
    tune = ["tune", str(model), "--cluster", "local:2", "--targets", "cpu@numpy",
            "--objective", "throughput", "--budget", "10", "--profiles", str(profiles),
            "-o", str(plan)]  # fmt: skip
    moment = random.Random(seed).uniform(3.0, 12.0)  # after the cluster is up
    code, output, killed = _autopart(tune, moment)
    assert killed, output
    assert code == 2, output
    assert _one_error_line(output).startswith("error: host host1 was lost while ")
    for saved in profiles.glob("*.csv"):
        assert not Profile.load(saved).dropped.count
    assert not plan.exists()
    code, output, killed = _autopart([*tune, "--replan"], moment)
    assert killed and code == 0, output
    assert "host host1 was lost while" in output and "planned again on host0" in output
    saved = api.load_plan(plan)[0]
    assert {host_of(t) for t in saved.assignment.values()} == {"host0"}
    assert any("(--replan)" in note for note in saved.notes)


def test_one_option_model_holds_the_options_across_hosts() -> None:
    from autopart.errors import AutopartError
    from autopart.tuning.options import BenchOptions, TuneOptions

    across = TuneOptions.build(cluster="local:2", objective="throughput", replan=True,
                               links=["host0-host1=1GB,1ms"], host_memory={"*": 10})  # fmt: skip
    assert across.across_hosts and across.links == ("host0-host1=1GB,1ms",)
    one = TuneOptions.build(cluster="local:2", links="host0-host1=1GB,1ms")  # one link, a str
    assert one.links == ("host0-host1=1GB,1ms",)
    assert not TuneOptions().across_hosts
    for fields, said in [
        ({"objective": "throughput"}, "give --cluster"),
        ({"replan": True}, "give a cluster"),
        ({"links": ("host0-host1=1GB,1ms",)}, "give a cluster"),
        ({"host_memory": {"host1": 10}}, "give a cluster"),
        ({"cluster": "local:2", "objective": "makespan"}, "not one across hosts"),
    ]:
        with pytest.raises(AutopartError, match=said):
            TuneOptions.build(**fields)
    with pytest.raises(AutopartError, match="give --cluster"):
        BenchOptions.build(objective="throughput")
