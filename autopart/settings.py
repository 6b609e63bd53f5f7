"""Machine-tuned settings: the provenance helper, the shared group, and their record.

Every tuned number in autopart was chosen by a measurement on this project's development
machine (2 cores of an AMD EPYC VM, PoCL's CPU OpenCL device, onnxruntime), not derived; a
machine that behaves differently may want other values. They come in groups of frozen
dataclasses whose fields carry their provenance (``source`` in the field's metadata, set by
:func:`tuned`), and each group lives beside the package that reads it:
:class:`~autopart.costmodel.cold.ColdEntrySettings`,
:class:`~autopart.costmodel.calibration.CalibrationSettings` and
:class:`~autopart.costmodel.fusion.FusionSettings` in the cost model;
:class:`~autopart.profile.timing.TimingSettings`,
:class:`~autopart.profile.speed.SpeedSettings` and
:class:`~autopart.profile.core_sharing.CoreSharingSettings` in the profiler;
:class:`~autopart.search.planner.SearchSettings` in the search; each codegen's own in
its folder (:meth:`~autopart.targets.codegen.Codegen.settings`); and
:class:`~autopart.tuning.settings.VerifySettings`,
:class:`~autopart.tuning.settings.ScreenSettings` and
:class:`~autopart.tuning.settings.AccuracySettings` in the tune.

This module, near the bottom of the layers, keeps what several layers share: the
provenance helper :func:`tuned`; the group read by more than one layer
(:class:`CommonSettings`, :data:`COMMON`); and :func:`settings_in_force` and
:func:`provenance`, which list the values and sources of the groups they are given. The
tuning layer gathers every group
(:func:`autopart.tuning.settings_record.settings_groups`), and ``autopart tune`` records
them in ``report.json`` so a result can be traced to the values it was made with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


def tuned(value: Any, source: str) -> Any:
    """A dataclass field defaulting to ``value``, with ``source`` (where it came from) kept.

    ``source`` goes into the field's metadata, where :func:`provenance` finds it.
    """
    return field(default=value, metadata={"source": source})


@dataclass(frozen=True)
class CommonSettings:
    """Tuned values read by several layers (the profiler, targets and the tune)."""

    check_tolerance: float = tuned(
        1e-3, "max relative error of a plan's outputs against the numpy reference"
    )
    compile_headroom: float = tuned(
        6.0,
        "the race compiles a plan only while this many times the model's weights are free: "
        "one compiled plan of alexnet (233 MiB of weights) held 1.7-5.6x them resident "
        "(onnxruntime 400-1300 MiB, OpenVINO f32 805, bf16 600); vgg19's tune, compiling "
        "every candidate at once, was killed by the kernel at 24 GB",
    )


COMMON = CommonSettings()


def settings_in_force(groups: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every tuned value of ``groups`` (name -> settings dataclass), by group and field.

    JSON-ready: tuples become lists. Groups keep the order of ``groups``.
    """
    return {
        group: {
            item.name: list(value)
            if isinstance(value := getattr(settings, item.name), tuple)
            else value
            for item in fields(settings)
        }
        for group, settings in groups.items()
    }


def provenance(groups: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Where every tuned value of ``groups`` came from (its ``source``), by group and field."""
    return {
        group: {item.name: str(item.metadata.get("source", "")) for item in fields(settings)}
        for group, settings in groups.items()
    }
