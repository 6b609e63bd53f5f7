"""Fixed channels between hosts: arrays carried whole, damage refused, senders told apart."""

from __future__ import annotations

import json
import secrets
from multiprocessing import AuthenticationError

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from autopart.cluster.channels import ChannelError, Closed, Inbox, Message, connect, dial, send

KEY = secrets.token_bytes(32)
DTYPES = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(),
    hnp.unsigned_integer_dtypes(),
    hnp.floating_dtypes(),
    hnp.complex_number_dtypes(),
    hnp.unicode_string_dtypes(max_len=4),
)


@pytest.fixture(scope="module")
def inbox() -> Inbox:
    box = Inbox("127.0.0.1", KEY)
    yield box
    box.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    arrays=st.lists(
        hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)),
        max_size=4,
    ),
    tag=st.integers(0, 2**40),
    transpose=st.booleans(),
)
def test_every_array_arrives_whole_with_its_dtype_and_shape(
    inbox: Inbox, arrays: list[np.ndarray], tag: int, transpose: bool
) -> None:
    values = {f"v{i}": (a.T if transpose else a) for i, a in enumerate(arrays)}
    with connect(inbox.address, KEY, "producer") as connection:
        send(connection, tag, values)
        got = inbox.get(timeout=10)
    assert isinstance(got, Message) and got.sender == "producer" and got.tag == tag
    assert list(got.values) == list(values)
    for name, array in values.items():
        assert got.values[name].dtype == array.dtype and got.values[name].shape == array.shape
        np.testing.assert_array_equal(got.values[name], array)
    assert isinstance(inbox.get(timeout=10), Closed)  # the sender closed its connection


def test_text_held_as_objects_is_carried_and_other_objects_refused(inbox: Inbox) -> None:
    with connect(inbox.address, KEY, "text") as connection:
        send(connection, 0, {"words": np.array(["ab", "c"], dtype=object)})
        got = inbox.get(timeout=10)
        assert isinstance(got, Message) and got.values["words"].tolist() == ["ab", "c"]
        with pytest.raises(ChannelError, match="dtype object"):
            send(connection, 1, {"mixed": np.array([1, "a"], dtype=object)})
        send(connection, 2, {}, error="the stage failed")
        failed = inbox.get(timeout=10)
        assert isinstance(failed, Message) and failed.error == "the stage failed"
    assert inbox.get(timeout=10) == Closed("text", "EOFError")


@pytest.mark.parametrize(
    "header",
    [
        b"not json",
        json.dumps({"tag": "1", "error": None, "values": []}).encode(),
        json.dumps({"tag": 1, "error": None, "values": [["x", "|O", [1]]]}).encode(),
        json.dumps({"tag": 1, "error": None, "values": [["x", "<f4", [-1]]]}).encode(),
        json.dumps({"tag": 1, "values": []}).encode(),
    ],
)
def test_a_damaged_message_closes_that_sender_and_no_other(inbox: Inbox, header: bytes) -> None:
    with (
        connect(inbox.address, KEY, "healthy") as healthy,
        dial(inbox.address, KEY) as raw,
    ):
        raw.send_bytes(json.dumps({"sender": "damaged"}).encode())
        raw.send_bytes(header)
        closed = inbox.get(timeout=10)
        assert isinstance(closed, Closed) and closed.sender == "damaged"
        assert "damaged message" in closed.reason or "Expecting" in closed.reason
        send(healthy, 7, {"x": np.ones(3)})
        assert inbox.get(timeout=10) == Message("healthy", 7, {"x": pytest.approx(np.ones(3))})
    assert inbox.get(timeout=10).sender == "healthy"


@pytest.mark.parametrize("shape", [[4], [2**40, 2**20]])
def test_a_payload_of_another_size_than_its_shape_is_damage(inbox: Inbox, shape: list[int]) -> None:
    with dial(inbox.address, KEY) as raw:
        raw.send_bytes(json.dumps({"sender": "short"}).encode())
        raw.send_bytes(json.dumps({"tag": 0, "error": None,
                                   "values": [["x", "<f4", shape]]}).encode())  # fmt: skip
        raw.send_bytes(b"\0" * 8)  # two floats, whatever the header says: nothing huge is made
        closed = inbox.get(timeout=10)
    assert isinstance(closed, Closed) and closed.sender == "short"
    assert "not the size its header gave" in closed.reason


def test_a_wrong_key_is_refused_and_the_inbox_goes_on() -> None:
    box = Inbox("127.0.0.1", KEY)
    try:
        with pytest.raises(AuthenticationError):
            connect(box.address, b"another key", "stranger")
        with connect(box.address, KEY, "friend") as connection:
            send(connection, 3, {"x": np.arange(4)})
            got = box.get(timeout=10)
        assert isinstance(got, Message) and got.sender == "friend" and got.tag == 3
    finally:
        box.close()
