"""The agreement probes' answers (int8, and float), kept on disk for the next process here.

A configuration's answer (:mod:`autopart.targets.openvino.agreement`) depends on the
configuration, on the libraries that compute and judge it (OpenVINO's int8 kernels,
onnxruntime's quantiser and reference, numpy's draws), on the CPU whose instructions the
kernels were chosen for, and on the probe itself (its threshold and :data:`FORMAT`). The
configuration is the key; the rest is the file's *scope*, part of its name and checked in
it: an answer is only read back where every one of them is the same. A float probe's key
starts with its precision, so it is never read as another precision's answer (bf16 shares
int8's threshold, so its file). Probing resnet50's 54 int8 configurations took 7.5-10 s of
a 60 s tune; read back, the tune spends that time on its screen.

The file is ``agreement-<scope>.json`` in the int8 cache folder
(:func:`~autopart.targets.quant_ranges.cache_dir`): JSON with the scope, the answers by
the sha256 of each key's ``repr`` and their digest. It is read once per process and
folder; new answers are merged into what is on disk under the file's lock and written
atomically, so two tunes at once lose neither's answers. A file that is damaged, of
another format or of another scope is not trusted: its configurations are probed again.
A cache that cannot be read or written is no error; it only costs the probes.
"""

from __future__ import annotations

import hashlib
import json
import platform
import threading
from collections.abc import Hashable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from autopart.io import atomic_write_bytes, json_digest, locked
from autopart.targets.cpu_units import cpu_flags, int8_sums_in_i16
from autopart.targets.host import cpu_model
from autopart.targets.qdq import WEIGHT_LEVELS
from autopart.targets.quant_ranges import cache_dir

FORMAT = "autopart-int8-agreement/1"  # bump when the probe judges differently

_LOCK = threading.Lock()
_LOADED: dict[Path, dict[str, bool]] = {}


def key_digest(key: Hashable) -> str:
    """The name of a configuration's answer on disk: the sha256 of its ``repr``.

    Keys are tuples of strings, numbers, bytes, ``None`` and tuples of them, whose
    ``repr`` is the same in every process.
    """
    return hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).hexdigest()[:32]


@cache
def scope(threshold: float) -> dict[str, Any]:
    """What answers depend on besides the configuration, under the probe's ``threshold``."""
    import numpy
    import onnx

    from autopart.targets.openvino import library

    try:
        import onnxruntime

        reference = onnxruntime.__version__
    except ImportError:  # the probe judges by OpenVINO's f32 instead
        reference = None
    flags = cpu_flags()
    return {
        "format": FORMAT,
        "threshold": threshold,
        "openvino": library.load_openvino().__version__,
        "reference": reference,  # onnxruntime, the oracle that judges
        "onnx": onnx.__version__,
        "arrays": numpy.__version__,  # the draws
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_flags": None if flags is None else sorted(flags),
        "weight_levels": WEIGHT_LEVELS[int8_sums_in_i16()],  # 7-bit weights on AVX2
    }


def store_path(threshold: float) -> Path:
    """The file of this machine's and these libraries' answers under ``threshold``."""
    name = json_digest(scope(threshold))[:20]
    return cache_dir() / f"agreement-{name}.json"


def saved_answers(threshold: float) -> dict[str, bool]:
    """The answers on disk by :func:`key_digest`, read once per process and folder.

    Empty when there is no file, or it is damaged or of another scope.
    """
    path = store_path(threshold)
    with _LOCK:
        if path not in _LOADED:
            _LOADED[path] = _read(path, scope(threshold))
        return _LOADED[path]


def save_answers(threshold: float, answers: Mapping[str, bool]) -> None:
    """Merge ``answers`` into the file on disk and into this process's copy of it.

    Answers already on disk stand (the first probe's answer is kept, as in memory).
    """
    if not answers:
        return
    path = store_path(threshold)
    expected = scope(threshold)
    with _LOCK:
        kept = _LOADED.setdefault(path, {})
        try:
            with locked(path):
                merged = {**answers, **_read(path, expected)}
                document = {"scope": expected, "answers": merged}
                document["digest"] = json_digest(merged)
                atomic_write_bytes(path, json.dumps(document, sort_keys=True).encode())
        except Exception:  # an unwritable cache costs the probes next time, nothing more
            merged = {**answers, **kept}
        kept.update(merged)


def forget_loaded() -> None:
    """Forget what was read from disk in this process (the files stay)."""
    with _LOCK:
        _LOADED.clear()


def _read(path: Path, expected: Mapping[str, Any]) -> dict[str, bool]:
    """The answers in ``path`` when it is intact and of ``expected``'s scope, else none."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        answers = document["answers"]
        if document["scope"] != expected or document["digest"] != json_digest(answers):
            return {}
        return {str(key): answer for key, answer in answers.items() if isinstance(answer, bool)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
