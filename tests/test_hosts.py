"""Hosts: the target grammar's host level, the network model, and clusters on Ray."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.cli import main
from autopart.costmodel.network import (
    Link,
    NetworkModel,
    fit_link,
    load_network,
    network_path,
    save_network,
)
from autopart.errors import ProfileError

SIZES = [1000 * 4**k for k in range(8)] + [64_000_000]


@settings(max_examples=60, deadline=None)
@given(
    latency_s=st.floats(1e-6, 1e-2),
    bytes_per_s=st.floats(1e7, 1e11),
    noise=st.lists(st.floats(-0.05, 0.05), min_size=len(SIZES), max_size=len(SIZES)),
)
def test_a_fitted_link_predicts_every_size_within_its_noise(
    latency_s: float, bytes_per_s: float, noise: list[float]
) -> None:
    truth = Link(latency_s, bytes_per_s)
    times = [truth.seconds(n) * (1 + e) for n, e in zip(SIZES, noise, strict=True)]
    fitted = fit_link(SIZES, times, [5] * len(SIZES))
    assert fitted.worst_error() <= 0.12  # relative residuals: small sizes count as large
    for nbytes in SIZES:
        assert fitted.seconds(nbytes) == pytest.approx(truth.seconds(nbytes), rel=0.12)
    assert [row[2] for row in fitted.measured] == [5] * len(SIZES)


def test_a_link_needs_two_sizes_and_positive_times() -> None:
    with pytest.raises(ValueError, match="two sizes"):
        fit_link([1000, 1000], [1e-3, 1e-3])
    with pytest.raises(ValueError, match="positive"):
        fit_link([1000, 2000], [1e-3, 0.0])
    with pytest.raises(ValueError, match="bandwidth"):
        Link(1e-3, 0.0)


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
    document["links"][0]["bytes_per_s"] = -1
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


def test_devices_of_a_local_cluster_are_found_on_each_host_with_its_own_core() -> None:
    _two_cores()
    from autopart import api

    described = api.cluster_devices("local:2")
    assert [d.host.name for d in described] == ["host0", "host1"]
    assert described[0].host.cores != described[1].host.cores
    for host in described:
        cpu = next(row for row in host.devices if row["device"] == "cpu")
        assert cpu["units"] == "cpu/0"  # kept to its own core: one unit
        assert "cpu@numpy" in host.targets and len(host.fingerprint) == 16
    result = CliRunner().invoke(main, ["devices", "--cluster", "local:2"])
    assert result.exit_code == 0, result.output
    assert "host1 targets: host1:cpu@numpy" in result.output
    assert "host0 fingerprint:" in result.output and "host1 fingerprint:" in result.output


def test_the_network_command_times_fits_and_saves_each_link(tmp_path: Path) -> None:
    _two_cores()
    result = CliRunner().invoke(
        main, ["network", "--cluster", "local:2", "--runs", "2", "--profiles", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    (saved,) = tmp_path.glob("network-*.json")
    model = load_network(saved)
    assert set(model.links) == {("host0", "host1"), ("host1", "host0")}
    assert set(model.hosts) == {"host0", "host1"}
    for link in model.links.values():
        assert [row[0] for row in link.measured] == SIZES
        assert all(row[1] > 0 and row[2] == 2 for row in link.measured)
        assert np.isfinite(link.latency_s) and link.bytes_per_s > 0
    flat = result.output.replace("\n", "")  # rich wraps long lines
    assert "host0 -> host1: latency" in flat and f"saved: {saved}" in flat
