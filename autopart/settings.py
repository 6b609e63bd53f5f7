"""The constants tuned to a machine, in one place, each with where its value came from.

Every number here was chosen by a measurement on this project's development machine (2
cores of an AMD EPYC VM, PoCL's CPU OpenCL device, onnxruntime), not derived; a machine that
behaves differently may want other values. They are grouped by the stage that reads them,
as frozen dataclasses whose fields carry their provenance (``source`` in the field's
metadata). :func:`settings_in_force` lists them all; ``autopart tune`` records that list in
``report.json`` so a result can be traced to the values it was made with.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any


def _tuned(value: Any, source: str) -> Any:
    return field(default=value, metadata={"source": source})


@dataclass(frozen=True)
class ColdEntrySettings:
    """How the cost model prices entering a target whose lane sat idle (costmodel.cold)."""

    gap_s: float = _tuned(
        5e-3,
        "the idle time before a cold entry is measured: a few ms of host work elsewhere, "
        "as while another partition runs (profile 'cold' rows)",
    )
    ramp_s: float = _tuned(
        5e-3,
        "time constant of a target going cold: fitted by experiments/exp_cold_entry.py "
        "(penalty against idle gap, results/cold_entry_fit.csv)",
    )


@dataclass(frozen=True)
class CalibrationSettings:
    """When measured subgraph windows rescale op sums (costmodel.calibration)."""

    min_nodes: int = _tuned(12, "models with fewer nodes get no calibration windows")
    max_window: int = _tuned(40, "at most this many nodes per calibration window")
    centres: tuple[float, ...] = _tuned(
        (1 / 6, 1 / 2, 5 / 6), "where the windows sit: the start, middle and end of the node order"
    )
    factor_range: tuple[float, float] = _tuned(
        (0.2, 5.0), "calibration factors are clipped to this range"
    )
    agreement: float = _tuned(
        1.5, "windows whose factors differ by more than this ratio disagree, and give no factor"
    )
    gross_error: float = _tuned(
        0.5,
        "scale only where the op sum is off by more than half: a second measurement of a "
        "whole model differs by 4-8% at the median, 30% at worst "
        "(experiments/exp_calibration_variants.py)",
    )


@dataclass(frozen=True)
class FusionSettings:
    """Which producer/consumer pairs the profiler times together (costmodel.fusion)."""

    light_flops: int = _tuned(
        8, "consumers of at most this many FLOPs per output element are fusion candidates"
    )
    per_class: int = _tuned(
        4,
        "pairs timed per (producer op, consumer op) class; the rest use the class ratio "
        "(experiments/exp_fusion_pairs.py)",
    )


@dataclass(frozen=True)
class VerifySettings:
    """How plans are timed against each other and when a win counts (tuning)."""

    check_tolerance: float = _tuned(
        1e-3, "max relative error of a plan's outputs against the numpy reference"
    )
    confidence: float = _tuned(
        0.95,
        "of the bootstrap interval on the ratio of two runners' medians over paired rounds; "
        "a runner whose interval excludes 1 measured differently (the usual 95%)",
    )
    min_paired_rounds: int = _tuned(
        5, "fewer paired rounds give no interval: a bootstrap of 4 medians has 35 distinct draws"
    )
    drift_limit: float = _tuned(
        0.2,
        "a single target predicted this far off its measurement gets a note: the two-core "
        "targets swing p90/p10 1.3-2.0 (experiments/exp_target_noise.py)",
    )
    drift_floor_s: float = _tuned(20e-6, "ignore drift under this: one launch's swing")
    measure_within: float = _tuned(
        3.0,
        "candidates predicted within this factor of the quickest have their partitions "
        "measured whole before the race: op sums were off by up to 3.3x on unseen models",
    )
    measure_max_partitions: int = _tuned(
        16, "candidates of more partitions are priced from op sums (and timed whole in the race)"
    )
    race_max_partitions: int = _tuned(
        256,
        "candidates of more partitions predicted over measure_within of the quickest do not "
        "race: compiling each partition takes 30-60 ms, and per-op-best on a 12,400-node "
        "transformer stack had 1,600 partitions (experiments/bench_scale.py)",
    )
    max_round_stretch: int = _tuned(20, "quick plans run up to this many times the rounds")
    settle_s: float = _tuned(
        5e-3,
        "untimed runs opening a block, while caches refill: run once after another plan, "
        "the 0.2 ms transformer took 1.8x its steady time and its second run 1.15x; "
        "mobilenetv3_small on openvino alone (0.44 ms) took 3.8x, 1.8x, 1.6x, 1.4x and "
        "came within 15% at its 7th run (experiments/exp_settle.py)",
    )
    settle_runs: int = _tuned(
        5,
        "plans quicker than settle_below_s also settle for at least this many runs: after "
        "another runner, openvino alone took 1.67x, 1.16x, 1.06x, 1.11x, 1.03x its steady "
        "time on shufflenet (2 ms), 1.53x, 1.11x, 1.03x on squeezenet, and onnxruntime "
        "alone 1.19x, 1.05x, 1.01x on shufflenet; resnet50 (21 ms) 1.04x at its first "
        "(experiments/exp_settle.py)",
    )
    settle_below_s: float = _tuned(
        0.02, "plans quicker than this settle for settle_s; slower ones run once untimed"
    )
    block_s: float = _tuned(5e-3, "timed runs of one block last about this long")
    max_block_runs: int = _tuned(50, "at most this many timed runs per block")
    compile_headroom: float = _tuned(
        6.0,
        "the race compiles a plan only while this many times the model's weights are free: "
        "one compiled plan of alexnet (233 MiB of weights) held 1.7-5.6x them resident "
        "(onnxruntime 400-1300 MiB, OpenVINO f32 805, bf16 600); vgg19's tune, compiling "
        "every candidate at once, was killed by the kernel at 24 GB",
    )
    core_sharing_limit: float = _tuned(
        1.4,
        "a timed round is run again when, right after it, a probe on every core at once took "
        "over this many times its time on one core alone: of 2,062 probes on the 2-core VM, "
        "1,795 read under 1.2 and 181 1.8-2.2 (spells), 23 fell between 1.3 and 1.6; blocks "
        "beside a probe over 1.4 timed onnxruntime on both cores 1.39x slower, on one core "
        "1.14x (experiments/exp_core_sharing.py)",
    )
    spin_linger_s: float = _tuned(
        0.15,
        "after a run at onnxruntime's default options its pool threads spin on and slow "
        "the next runner: resnet50 on openvino alone took 47 ms right after it, 44 ms "
        "after a 5 ms pause, 38.5 after 20 ms and 32 after 100 ms (31-33 after itself); "
        "timing waits this long after such a runner before the next one starts",
    )


@dataclass(frozen=True)
class SearchSettings:
    """Bounds of the search (search.planner)."""

    ilp_time_limit_s: float = _tuned(
        60.0,
        "the ILP's time limit when no budget is given, and its cap: densenet121 (609 nodes, "
        "7 targets) solved in 0.36 s, a 3000-node layered graph hit 60 s with a 0.3% gap "
        "(experiments/results/ilp_scaling.csv)",
    )
    default_trials: int = _tuned(300, "optuna trials without a budget")


@dataclass(frozen=True)
class ScreenSettings:
    """How a tune screens the targets before profiling them in full (tuning.screen)."""

    min_gain: float = _tuned(
        0.02,
        "a target is profiled in full only where its one-pass op costs, scaled to its whole "
        "model's time, could save at least this share of the incumbent's time: the bar is "
        "1.02x the best peer, so a smaller saving could not be told from it",
    )
    rounds: int = _tuned(
        3, "timed rounds of each whole model in the screen: enough to rank 2x apart targets"
    )
    min_timed_s: float = _tuned(
        0.2, "a quick whole model gets more rounds, up to this much timed wall time"
    )
    budget_s: float = _tuned(
        60.0, "the default --budget of a tune, in wall seconds: a plan in about a minute"
    )


@dataclass(frozen=True)
class TimingSettings:
    """How hard to time one thing.

    After ``warmup`` untimed runs (fewer for slow subgraphs, see
    :func:`autopart.profile.timing.collect`), runs come in batches of ``batch``. Timing
    stops once at least ``min_runs`` were taken, at least ``min_seconds`` of wall time were
    spent, and one more batch moved the median by less than ``settled_change`` (relative); or
    after ``max_runs`` runs; or once ``max_seconds`` of wall time were spent on this one
    measurement.

    The profiler spreads each measurement over ``passes`` passes through its whole job list
    (each pass taking a ``passes``-th of the runs and time) and keeps the median of the
    passes' medians (:func:`autopart.profile.timing.summarise_passes`), so that a burst of
    host speed-up or slow-down lasting a few seconds skews no single op.
    """

    warmup: int = _tuned(8, "untimed runs first: caches, lazy allocation, JIT warm-up")
    min_runs: int = _tuned(7, "fewest timed runs of one thing")
    max_runs: int = _tuned(60, "most timed runs of one thing")
    batch: int = _tuned(4, "runs between two looks at the median")
    settled_change: float = _tuned(0.02, "stop once a batch moves the median by less than this")
    max_seconds: float = _tuned(1.0, "most wall time spent timing one thing")
    passes: int = _tuned(
        3,
        "passes through the job list, median of their medians: a burst of host speed-up or "
        "slow-down lasting seconds skews no single op (experiments/exp_target_noise.py)",
    )
    min_seconds: float = _tuned(0.0, "least wall time spent timing one thing")

    def per_pass(self) -> TimingSettings:
        """The settings of one of ``passes`` passes: a share of the runs and of the time."""
        share = max(self.passes, 1)
        return replace(
            self,
            min_runs=max(-(-self.min_runs // share), 3),
            max_runs=max(-(-self.max_runs // share), 3),
            batch=min(self.batch, max(-(-self.min_runs // share), 3)),
            max_seconds=self.max_seconds / share,
            min_seconds=self.min_seconds / share,
            passes=1,
        )

    def for_short_runs(self) -> TimingSettings:
        """The settings for copies and launch probes: sampled for 30% of ``max_seconds``.

        A small copy or an empty launch takes microseconds, so ``min_runs`` of them span a
        few milliseconds, and on a shared machine such a cost swings by 2x from one such
        moment to the next (the PoCL worker threads and the host share two cores).
        Sampling for a share of the time budget instead averages over those swings.
        """
        return replace(
            self,
            min_seconds=max(self.min_seconds, 0.3 * self.max_seconds),
            max_runs=max(self.max_runs, 3000),
        )

    def to_dict(self) -> dict[str, float | int]:
        """The settings as a plain dict (stored in profile metadata)."""
        return asdict(self)


@dataclass(frozen=True)
class AccuracySettings:
    """How the default tolerance follows the ecosystem (tuning.accuracy)."""

    peer_allowance: float = _tuned(
        0.1,
        "the default tolerance is OpenVINO as installed's own error on the same samples times "
        "1 + this, for rounding: the issue's 10% allowance (its error varies ~5% by sample)",
    )
    tighten_rounds: int = _tuned(
        2,
        "times the search solves again with a tighter bound when the ILP's plan measures "
        "over the tolerance (each round verifies every candidate again)",
    )
    evaluation_samples: int = _tuned(
        4,
        "seeded random inputs besides the timing feeds whose outputs are checked: four "
        "more samples changed bf16 plans' max error by under 20% on the zoo",
    )


@dataclass(frozen=True)
class SpeedSettings:
    """When a profile's rows are scaled to the machine's speed now (profile.speed)."""

    window_s: float = _tuned(
        3600.0,
        "a row is scaled by the speed stamp nearest its measurement only within this: "
        "every measuring run stamps at its end, and a profile of a large model "
        "takes up to 15 min",
    )
    deadband: float = _tuned(
        0.1,
        "factors within this of 1 are left at 1: 60 speeds taken back to back differed "
        "from the one before by 0.4%/0.6% (one core/every core) at the median, 1.8%/5.2% at "
        "p90 and 7.8%/21% at p99 (experiments/exp_speed_drift.py)",
    )


COLD_ENTRY = ColdEntrySettings()
CALIBRATION = CalibrationSettings()
FUSION = FusionSettings()
VERIFY = VerifySettings()
SEARCH = SearchSettings()
SCREEN = ScreenSettings()
TIMING = TimingSettings()
ACCURACY = AccuracySettings()
SPEED = SpeedSettings()
_GROUPS = {
    "accuracy": ACCURACY,
    "timing": TIMING,
    "cold_entry": COLD_ENTRY,
    "calibration": CALIBRATION,
    "fusion": FUSION,
    "verify": VERIFY,
    "search": SEARCH,
    "screen": SCREEN,
    "speed": SPEED,
}


def settings_in_force() -> dict[str, dict[str, Any]]:
    """Every tuned constant by group and name, with its value (JSON-ready)."""
    return {
        group: {
            item.name: list(value)
            if isinstance(value := getattr(settings, item.name), tuple)
            else value
            for item in fields(settings)
        }
        for group, settings in _GROUPS.items()
    }


def provenance() -> dict[str, dict[str, str]]:
    """Where every tuned constant's value came from, by group and name."""
    return {
        group: {item.name: str(item.metadata.get("source", "")) for item in fields(settings)}
        for group, settings in _GROUPS.items()
    }
