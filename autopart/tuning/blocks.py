"""How each runner runs in a round of the race: its block, the rounds' number and order.

A block is a few untimed runs that settle the caches, then timed runs back to back, as a
user running the plan in a loop would see it (:func:`block_for`); quick plans get more
rounds (:func:`stretched`), and every round runs the runners in a fresh order
(:func:`round_order`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from autopart.tuning.settings import VERIFY

WARMUP_ROUNDS = 2  # untimed rounds before the timed ones, the race's default


@dataclass(frozen=True)
class Block:
    """How one plan runs in each round: ``settle`` untimed runs, then ``timed`` timed runs.

    With ``linger`` the runner then waits while its library's threads spin on
    (:attr:`~autopart.targets.codegen.CompiledSubgraph.linger_s`), so that they do not slow the
    next runner's timed runs; without it (a run judged, not timed) it returns at once.
    """

    settle: int = 0
    timed: int = 1
    linger: bool = True


def block_for(run_s: float) -> Block:
    """The block for a plan whose one run takes ``run_s`` seconds.

    Every timed run follows a run of its own plan, as in a user's loop: switching from one
    plan to another leaves the caches, the cores' threads and their clocks to the plan that
    ran before. The first run of a 0.2 ms transformer took 1.8 times its steady time and
    the second 1.15 times, a 6 ms CNN 1.04 to 1.07 times; resnet50 on OpenVINO took 31 ms
    after its own run and 37 ms after another runner and a pause. So plans quicker than
    ``VERIFY.settle_below_s`` open each block with untimed runs lasting ``VERIFY.settle_s``,
    and at least ``VERIFY.settle_runs`` of them (a few-ms model needs several runs, not
    several ms, to reach its steady time), and time enough runs to fill ``VERIFY.block_s``
    (at most ``VERIFY.max_block_runs`` of either); slower plans run once untimed, then once
    timed; plans of ``VERIFY.unsettled_from_s`` or more run once, timed: what the switch
    costs (a few milliseconds: 2-4% of a 0.2 s run, nothing measurable of a 0.25 s one) is
    then lost in the run, and every runner pays it. The settings are those of
    :class:`~autopart.tuning.settings.VerifySettings`.
    """
    run_s = max(run_s, 1e-9)
    if run_s >= VERIFY.unsettled_from_s:
        return Block(settle=0, timed=1)
    if run_s >= VERIFY.settle_below_s:
        return Block(settle=1, timed=1)
    most = VERIFY.max_block_runs
    settle = min(most, max(VERIFY.settle_runs, math.ceil(VERIFY.settle_s / run_s)))
    timed = min(most, max(1, math.ceil(VERIFY.block_s / run_s)))
    return Block(settle, timed)


def stretched(rounds: int, round_s: float, min_timed_s: float) -> int:
    """How many timed rounds make ``min_timed_s`` seconds, never fewer than ``rounds``."""
    wanted = math.ceil(min_timed_s / max(round_s, 1e-9))
    return max(rounds, min(wanted, rounds * VERIFY.max_round_stretch))


def round_order(order: Sequence[str], round_index: int) -> list[str]:
    """The order in which ``order``'s runners run in round ``round_index``: a permutation.

    Each round shuffles afresh (seeded by the round, so runs repeat), so that every runner
    follows a different one from round to round. A runner's after-effects slow whatever
    runs next: onnxruntime at its defaults leaves its pool threads spinning, and the next
    runner measured 1.3-1.5x slower. Rotating one fixed order would keep every runner
    behind the same neighbour in all rounds but one, and bias its median by that much.
    """
    shuffled = list(order)
    random.Random(round_index).shuffle(shuffled)
    return shuffled
