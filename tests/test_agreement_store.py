"""The int8 agreement answers on disk: read back by the next process, never when damaged or
made under other libraries or another CPU, merged when two processes write."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autopart.ir.graph import Graph
from autopart.targets import quant_ranges
from autopart.targets.openvino import agreement, agreement_store, library
from tests.test_int8 import _conv_zoo, counting_compiles, needs_int8

THRESHOLD = agreement.INT8_AGREEMENT


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test keeps its answers in a cache folder of its own, and starts knowing none."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("AUTOPART_CACHE", str(folder))
    quant_ranges.forget_memo()
    library.clear_compiled()
    agreement.forget_answers()
    yield folder
    agreement.forget_answers()


def _answers(graph: Graph) -> list[bool]:
    return [agreement.agrees_in_int8(node, graph) for node in graph.nodes]


@needs_int8
def test_a_second_process_reads_the_answers_back_and_probes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = _conv_zoo(tmp_path / "zoo.onnx")
    compiled = counting_compiles(monkeypatch)
    first = _answers(graph)
    assert len(compiled) == 2 and any(first)  # the convolutions, then the MatMul
    assert agreement_store.store_path(THRESHOLD).is_file()
    agreement.forget_answers()  # as a new process: nothing known but the file
    assert _answers(graph) == first
    assert len(compiled) == 2


@needs_int8
def test_a_damaged_file_is_not_trusted_and_its_configurations_are_probed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = _conv_zoo(tmp_path / "zoo.onnx")
    first = _answers(graph)
    path = agreement_store.store_path(THRESHOLD)
    document = json.loads(path.read_text())
    document["answers"] = {key: not answer for key, answer in document["answers"].items()}
    path.write_text(json.dumps(document))  # answers changed, digest left: damaged
    agreement.forget_answers()
    compiled = counting_compiles(monkeypatch)
    assert _answers(graph) == first
    assert len(compiled) == 2
    agreement.forget_answers()
    path.write_bytes(path.read_bytes()[:40])  # cut short
    assert _answers(graph) == first


@needs_int8
def test_answers_made_under_another_library_or_cpu_are_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = _conv_zoo(tmp_path / "zoo.onnx")
    _answers(graph)
    made_here = agreement_store.store_path(THRESHOLD)
    for fact, other in [("openvino", "1999.0"), ("cpu_flags", ["sse2"])]:
        agreement.forget_answers()
        elsewhere = {**agreement_store.scope(THRESHOLD), fact: other}
        monkeypatch.setattr(agreement_store, "scope", lambda threshold, e=elsewhere: e)
        assert agreement_store.store_path(THRESHOLD) != made_here
        assert agreement_store.saved_answers(THRESHOLD) == {}
        document = json.loads(made_here.read_text())
        assert agreement_store._read(made_here, elsewhere) == {}  # the scope inside is checked
        assert document["scope"] != elsewhere


def test_two_writers_keep_each_others_answers_and_the_first_answer_stands() -> None:
    agreement_store.save_answers(THRESHOLD, {"a": True, "b": False})
    agreement_store.forget_loaded()  # another process, which read the file before "a"
    agreement_store.save_answers(THRESHOLD, {"a": False, "c": True})
    agreement_store.forget_loaded()
    assert agreement_store.saved_answers(THRESHOLD) == {"a": True, "b": False, "c": True}


def test_a_cache_that_cannot_be_written_costs_nothing_but_the_probes(own_cache: Path) -> None:
    own_cache.parent.mkdir(parents=True, exist_ok=True)
    own_cache.write_text("a file where the cache folder belongs")
    agreement_store.save_answers(THRESHOLD, {"a": True})
    assert agreement_store.saved_answers(THRESHOLD) == {"a": True}  # kept in the process


_DIGEST = """
from autopart.targets.openvino.agreement_store import key_digest
print(key_digest((("", "Conv", 13, ("<f4", None), ("<f4",), (("pads", (1, 1)), ("alpha", 0.1),
    ("raw", b"\\x00\\xff"))), ((1, 8, "batch"), "ab12"), ((), None))))
"""


def test_a_keys_name_on_disk_is_the_same_in_every_process() -> None:
    key = (
        (
            "",
            "Conv",
            13,
            ("<f4", None),
            ("<f4",),
            (("pads", (1, 1)), ("alpha", 0.1), ("raw", b"\x00\xff")),
        ),
        ((1, 8, "batch"), "ab12"),
        ((), None),
    )
    elsewhere = subprocess.run(
        [sys.executable, "-c", _DIGEST], capture_output=True, text=True, check=True
    )
    assert elsewhere.stdout.strip() == agreement_store.key_digest(key)
