"""What hosts on the driver's machine lose streaming together: the fit and its file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.costmodel.network import Link, NetworkModel, load_network, save_network
from autopart.costmodel.sharing import MAX_OVERHEAD_S, MIN_SHARE, Sharing, fit_sharing
from autopart.errors import ProfileError

HOSTS = ("host0", "host1")


@settings(max_examples=80, deadline=None)
@given(
    share=st.floats(0.3, 1.0),
    overhead=st.floats(0.0, 5e-3),
    quick=st.floats(5e-4, 5e-3),
    ratio=st.floats(4.0, 20.0),
)
def test_two_points_give_back_the_share_and_the_overhead_they_were_made_of(
    share: float, overhead: float, quick: float, ratio: float
) -> None:
    truth = Sharing(HOSTS, share, overhead)
    points = [(t, truth.efficiency(t)) for t in (quick, quick * ratio)]
    fitted = fit_sharing(HOSTS, points)
    for seconds in (quick / 2, quick, quick * ratio, 1.0):
        assert fitted.efficiency(seconds) == pytest.approx(truth.efficiency(seconds), abs=2e-3)
    assert fitted.measured == tuple(points)


@settings(max_examples=60, deadline=None)
@given(points=st.lists(st.tuples(st.floats(1e-5, 1.0), st.floats(0.01, 1.9)), min_size=1,
                       max_size=4))  # fmt: skip
def test_any_measured_points_fit_within_the_bounds(points: list[tuple[float, float]]) -> None:
    """Noisy points (an efficiency above 1, one below any share) still give a sharing in
    range, whose efficiency rises with the time an input takes and stays within its share."""
    fitted = fit_sharing(HOSTS, points)
    assert MIN_SHARE <= fitted.share <= 1.0 and 0.0 <= fitted.overhead_s <= MAX_OVERHEAD_S
    times = [1e-4, 1e-3, 1e-2, 1e-1]
    efficiencies = [fitted.efficiency(t) for t in times]
    assert efficiencies == sorted(efficiencies) and efficiencies[-1] <= fitted.share


def test_sharing_applies_only_while_every_shared_host_is_at_work() -> None:
    sharing = Sharing(HOSTS, 0.9, 1e-3)
    assert sharing.applies(["host0", "host1", "host2"]) and not sharing.applies(["host1"])
    assert sharing.efficiency(1e-3) == pytest.approx(0.45)
    for bad in [(("host0",), 0.9, 0.0), (HOSTS, 1.2, 0.0), (HOSTS, 0.9, -1e-3), (("a", "a"), 1, 0)]:
        with pytest.raises(ValueError):
            Sharing(*bad)
    with pytest.raises(ValueError):
        fit_sharing(HOSTS, [])


def test_the_network_model_keeps_its_sharing_and_refuses_a_damaged_one(tmp_path: Path) -> None:
    links = {("host0", "host1"): Link.simple(1e-4, 1e9)}
    sharing = fit_sharing(HOSTS, [(2e-3, 0.8), (2e-2, 0.88)])
    path = tmp_path / "network.json"
    save_network(NetworkModel(links, {"host0": "a"}, sharing), path)
    loaded = load_network(path)
    assert loaded.sharing == sharing and loaded.links == links
    save_network(NetworkModel(links), path)  # a model without: none read back
    assert load_network(path).sharing is None
    assert NetworkModel(links).merged(NetworkModel(sharing=sharing)).sharing == sharing
    assert NetworkModel(links, sharing=sharing).merged(NetworkModel(links)).sharing == sharing
    save_network(NetworkModel(links, sharing=sharing), path)
    document = json.loads(path.read_text())
    for key, bad in [("share", 3.0), ("overhead_s", -1.0), ("hosts", ["host0"]), ("measured", 5)]:
        damaged = json.loads(json.dumps(document))
        damaged["sharing"][key] = bad
        path.write_text(json.dumps(damaged))
        with pytest.raises(ProfileError, match="damaged"):
            load_network(path)
