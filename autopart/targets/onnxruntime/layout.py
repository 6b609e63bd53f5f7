"""Reading onnxruntime's profiler output: time in layout conversions against the rest."""

from __future__ import annotations

from typing import Any

# The kernels onnxruntime's NCHWc transformer puts where blocked-layout ops meet the rest.
LAYOUT_KERNELS = frozenset({"ReorderInput", "ReorderOutput"})


def layout_seconds_per_run(events: list[dict[str, Any]], runs: int) -> list[tuple[float, float]]:
    """Per ``model_run`` in an onnxruntime profile: seconds in layout kernels, in the rest.

    A profile without ``model_run`` markers (another onnxruntime version) gets the kernels'
    totals spread evenly over the ``runs`` runs it recorded.
    """
    windows = [
        (event["ts"], event["ts"] + event["dur"])
        for event in events
        if event.get("cat") == "Session" and event.get("name") == "model_run"
    ]
    kernels = [
        (event["ts"], event["dur"], event.get("args", {}).get("op_name") in LAYOUT_KERNELS)
        for event in events
        if event.get("cat") == "Node" and str(event.get("name", "")).endswith("_kernel_time")
    ]

    def sums(chosen: list[tuple[int, int, bool]], share: float) -> tuple[float, float]:
        layout = sum(d for _, d, is_layout in chosen if is_layout)
        other = sum(d for _, d, is_layout in chosen if not is_layout)
        return layout * 1e-6 * share, other * 1e-6 * share

    if not windows:
        return [sums(kernels, 1.0 / max(runs, 1))] * runs
    return [sums([k for k in kernels if start <= k[0] <= end], 1.0) for start, end in windows]
