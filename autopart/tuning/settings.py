"""The tune's tuned values: the groups read only inside :mod:`autopart.tuning`.

:class:`VerifySettings` (the race: how plans are timed against each other and when a win
counts), :class:`ScreenSettings` (the screen before profiling) and
:class:`AccuracySettings` (the default tolerance). The other groups live beside the
packages that read them; :func:`autopart.tuning.settings_record.settings_groups` gathers
them all for ``report.json``.
"""

from __future__ import annotations

from dataclasses import dataclass

from autopart.settings import tuned


@dataclass(frozen=True)
class VerifySettings:
    """How plans are timed against each other and when a win counts (tuning)."""

    confidence: float = tuned(
        0.95,
        "of the bootstrap interval on the ratio of two runners' medians over paired rounds; "
        "a runner whose interval excludes 1 measured differently (the usual 95%)",
    )
    min_paired_rounds: int = tuned(
        5, "fewer paired rounds give no interval: a bootstrap of 4 medians has 35 distinct draws"
    )
    drift_limit: float = tuned(
        0.2,
        "a single target predicted this far off its measurement gets a note: the two-core "
        "targets swing p90/p10 1.3-2.0 (experiments/exp_target_noise.py)",
    )
    drift_floor_s: float = tuned(20e-6, "ignore drift under this: one launch's swing")
    measure_within: float = tuned(
        3.0,
        "candidates predicted within this factor of the quickest have their partitions "
        "measured whole before the race: op sums were off by up to 3.3x on unseen models",
    )
    race_within: float = tuned(
        1.5,
        "candidates priced wholly from partitions timed whole, and peers the screen timed, "
        "beyond this factor of the quickest do not race: a second timing of a whole model "
        "differs by 4-8% at the median, 30% at worst; each runner raced holds a compiled "
        "model (resnet50's race of 21 runners peaked at 4.8 GiB)",
    )
    measure_max_partitions: int = tuned(
        16, "candidates of more partitions are priced from op sums (and timed whole in the race)"
    )
    race_max_partitions: int = tuned(
        256,
        "candidates of more partitions predicted over measure_within of the quickest do not "
        "race: compiling each partition takes 30-60 ms, and per-op-best on a 12,400-node "
        "transformer stack had 1,600 partitions (experiments/bench_scale.py)",
    )
    timed_as_peer_s: float = tuned(
        10e-3,
        "a plan a racing peer runs (one partition compiled as its library compiles the model "
        "alone) is timed as that peer where the screen timed it whole at this or longer: "
        "the plan's executor added nothing measurable over the peer on models of 0.5-256 ms "
        "(ratios 0.95-1.03; experiments/exp_plan_overhead.py), while timing both doubles "
        "that library's share of each round",
    )
    race_held: int = tuned(
        2,
        "candidate plans compiled at once in a tune's race, beside the peers (heats): each "
        "of resnet50's plans held 0.2-0.4 GiB compiled, and nine runners at once took its "
        "tune to 2.2-2.5 GiB; the quickest so far stays, the next enters as one leaves",
    )
    finish_s: float = tuned(
        2.0,
        "seconds of a tune's budget kept for after the race: its last round, the plan and "
        "report written, the libraries unloaded at exit (resnet50: 1.1 s past a 60 s "
        "budget before it was kept, 0.2 s past with 1.5 s kept)",
    )
    max_round_stretch: int = tuned(20, "quick plans run up to this many times the rounds")
    settle_s: float = tuned(
        5e-3,
        "untimed runs opening a block, while caches refill: run once after another plan, "
        "the 0.2 ms transformer took 1.8x its steady time and its second run 1.15x; "
        "mobilenetv3_small on openvino alone (0.44 ms) took 3.8x, 1.8x, 1.6x, 1.4x and "
        "came within 15% at its 7th run (experiments/exp_settle.py)",
    )
    settle_runs: int = tuned(
        5,
        "plans quicker than settle_below_s also settle for at least this many runs: after "
        "another runner, openvino alone took 1.67x, 1.16x, 1.06x, 1.11x, 1.03x its steady "
        "time on shufflenet (2 ms), 1.53x, 1.11x, 1.03x on squeezenet, and onnxruntime "
        "alone 1.19x, 1.05x, 1.01x on shufflenet; resnet50 (21 ms) 1.04x at its first "
        "(experiments/exp_settle.py)",
    )
    settle_below_s: float = tuned(
        0.02, "plans quicker than this settle for settle_s; slower ones run once untimed"
    )
    unsettled_from_s: float = tuned(
        0.5,
        "plans this slow run timed with no untimed run first: the first run after another "
        "runner cost at most 1.5 ms more from 0.3 to 32 ms (experiments/results/settle.csv), "
        "4.6-7.8 ms more (2.4-4.1%) on a 190 ms image classifier and nothing beyond the runs' "
        "own 3% on a 230-270 ms video model (settle_slow_1206.csv): under 1.6% of a 0.5 s "
        "run, and every runner pays it; the settle run doubled the race of slow models",
    )
    block_s: float = tuned(5e-3, "timed runs of one block last about this long")
    max_block_runs: int = tuned(50, "at most this many timed runs per block")


@dataclass(frozen=True)
class ScreenSettings:
    """How a tune screens the targets before profiling them in full (tuning.screen)."""

    min_gain: float = tuned(
        0.02,
        "a target is profiled in full only where its one-pass op costs, scaled to its whole "
        "model's time, could save at least this share of the incumbent's time: the bar is "
        "1.02x the best peer, so a smaller saving could not be told from it",
    )
    rounds: int = tuned(
        3, "timed rounds of each whole model in the screen: enough to rank 2x apart targets"
    )
    min_timed_s: float = tuned(
        0.2, "a quick whole model gets more rounds, up to this much timed wall time"
    )
    budget_s: float = tuned(
        60.0, "the default --budget of a tune, in wall seconds: a plan in about a minute"
    )
    whole_share: float = tuned(
        0.5,
        "the share of --budget (from the command's start) within which the screen starts "
        "timing another whole model; past it the least needed are skipped, so that profiling "
        "and the race get the rest (a 12,400-node model compiles in 16-18 s per target)",
    )
    deadline_nodes: int = tuned(
        2000,
        "under a budget, a model of at least this many nodes is compiled whole by each "
        "codegen's first screen job within the budget (OpenVINO: in a worker process it "
        "can stop, which costs ~1 s to start): OpenVINO compiled a 50,000-op elementwise "
        "chain for over 10 minutes and a 2,000-op one in 18 s, but a 2,000-node transformer "
        "stack in 1.1 s, a 12,400-node one in 16 s and resnet50's 122 nodes in 0.4 s",
    )
    forecast_nodes: int = tuned(
        500,
        "the smaller of the two run-order prefixes a codegen compiles to forecast its whole "
        "compile (the larger is twice it): OpenVINO compiled 500 nodes of a 50,000-op chain "
        "in 0.86 s and of a transformer stack in 0.31 s, so both prefixes cost a few seconds",
    )
    forecast_margin: float = tuned(
        2.0,
        "a codegen is skipped only when its whole compile is forecast past this many times "
        "the deadline: the forecast from two prefixes is a power law, and a 1.7x swing of "
        "this machine's speed between them moves its exponent by up to 0.8",
    )
    forecast_max_exponent: float = tuned(
        3.0,
        "the largest exponent of the forecast's power law: OpenVINO's chain compile grew "
        "n^2.1 to n^2.9 from 500 to 4,000 nodes, a transformer stack's n^0.9 to n^1.7",
    )


@dataclass(frozen=True)
class AccuracySettings:
    """How the default tolerance follows the ecosystem (tuning.accuracy)."""

    peer_allowance: float = tuned(
        0.1,
        "the default tolerance is OpenVINO as installed's own error on the same samples times "
        "1 + this, for rounding: the issue's 10% allowance (its error varies ~5% by sample)",
    )
    tighten_rounds: int = tuned(
        2,
        "times the search solves again with a tighter bound when the ILP's plan, or its "
        "precisions on one library, measures over the tolerance (each round verifies every "
        "candidate again)",
    )
    drop_scale_s: float = tuned(
        10.0,
        "seconds of calibration samples run with every node reduced, to scale the "
        "sensitivities to a task metric's drop (tuning.drop_model); as long as the "
        "sensitivities' own budget, so that a task metric at most doubles that stage",
    )
    sensitivity_share: float = tuned(
        0.5,
        "under a budget, the share of what it leaves before the race's reserve that the "
        "sensitivities may take; the search and the partitions timed whole get the rest "
        "(a 1,092-node optical-flow model's sensitivities took 14 s of a 60 s budget that "
        "had 16 s left, and the tune took 69 s)",
    )
    evaluation_samples: int = tuned(
        4,
        "seeded random inputs besides the timing feeds whose outputs are checked: four "
        "more samples changed bf16 plans' max error by under 20% on the zoo",
    )


VERIFY = VerifySettings()
SCREEN = ScreenSettings()
ACCURACY = AccuracySettings()
