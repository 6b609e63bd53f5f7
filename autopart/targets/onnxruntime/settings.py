"""The onnxruntime codegen's tuned values, with where each came from.

Read by :mod:`autopart.targets.onnxruntime.codegen` and :mod:`autopart.targets.onnxruntime.peer`
(this module defines no codegen: the registry imports only a folder's ``codegen`` module).
"""

from __future__ import annotations

from dataclasses import dataclass

from autopart.settings import tuned


@dataclass(frozen=True)
class OnnxruntimeSettings:
    """How long onnxruntime's pool threads slow the next runner (targets.onnxruntime)."""

    spin_linger_s: float = tuned(
        0.15,
        "after a run at onnxruntime's default options its pool threads spin on and slow "
        "the next runner: resnet50 on openvino alone took 47 ms right after it, 44 ms "
        "after a 5 ms pause, 38.5 after 20 ms and 32 after 100 ms (31-33 after itself); "
        "timing waits this long after such a runner before the next one starts",
    )


ONNXRUNTIME = OnnxruntimeSettings()
