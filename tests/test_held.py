"""Objects shared by key only while something else holds them (autopart.targets.held)."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st

from autopart.targets.held import Held


class _Made:
    """A stand-in compiled model."""

    def __init__(self, key: int) -> None:
        self.key = key


@given(st.lists(st.tuples(st.integers(0, 4), st.booleans()), max_size=30))
def test_a_key_s_object_is_shared_while_held_and_made_anew_once_let_go(
    steps: list[tuple[int, bool]],
) -> None:
    """Whatever the order of asks and releases: an ask returns the object still held under
    its key, else makes one; nothing is kept alive by the store itself."""
    store, holding, made = Held(), {}, 0

    def make(key: int) -> _Made:
        nonlocal made
        made += 1
        return _Made(key)

    for key, keep in steps:
        before = made
        got = store.get_or_make(key, lambda key=key: make(key))
        assert got.key == key
        if key in holding:
            assert got is holding[key] and made == before
        else:
            assert made == before + 1
        if keep:
            holding[key] = got
        else:
            holding.pop(key, None)
        del got
        assert len(store) == len(holding)
    store.clear()
    assert len(store) == 0 and store.values() == []


def test_threads_asking_at_once_all_get_an_object_of_their_key() -> None:
    store = Held()
    kept: list[_Made] = []
    lock = threading.Lock()

    def ask(key: int) -> None:
        got = store.get_or_make(key, lambda: _Made(key))
        with lock:
            kept.append(got)

    threads = [threading.Thread(target=ask, args=(i % 3,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(made.key for made in kept) == sorted(i % 3 for i in range(12))
    assert {id(made) for made in store.values()} <= {id(made) for made in kept}
