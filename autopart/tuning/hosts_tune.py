"""``tune --cluster``: a plan across the hosts of a Ray cluster, searched, run and measured.

1. **Profile** each host on itself, once per fingerprint (:mod:`.host_profiles`), within
   the tune's budget each; a host's targets are those its profile prices for every node.
2. **Network**: the model saved for these hosts, or measured now and saved
   (:mod:`autopart.cluster.links`).
3. **Search** (:mod:`autopart.search.hosts`): the quickest plan for one input, the
   pipeline of the highest rate, and replicas of the whole model where two hosts or more
   can hold it; weights capped per host by ``host_memory``.
4. **Verify** by running each distinct candidate on the hosts: its latency on one input
   (median of the tune's rounds), each judged sample once, and a stream of about a
   second's inputs (:data:`STREAM_INPUTS`) cycling through those samples, rated once full
   (:attr:`~autopart.runtime.hosts.StreamResult.rate`). The objective's measurement
   chooses, never the prediction; the report puts each beside its prediction.

Precision and accuracy are chosen as a local tune chooses them: each host's targets are
those ``--precision`` allows (every precision offered, by default), and every candidate
is judged as a local tune judges a plan (:mod:`autopart.tuning.judge`): on the user's
validation samples (``--inputs``) by the task metric (``--metric``), held to its budget
(``--max-drop``, else the metric's default), or without samples on seeded random inputs
by max-rel, held to the number given, else OpenVINO as installed's drop on the same
samples plus 10%, never below the f32 runtimes' own. Its outputs, alone and in the
stream, are compared with the numpy reference's. Where no candidate is within the budget,
the search runs again on f32 targets alone, and those candidates run too.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from autopart.cluster.links import network_of
from autopart.cluster.session import Host, HostLostError, cluster
from autopart.costmodel import costs_from_profile
from autopart.costmodel.costs import Costs
from autopart.costmodel.from_profile import profile_targets
from autopart.costmodel.network import NetworkModel, network_path
from autopart.costmodel.sharing import Sharing
from autopart.errors import AutopartError, ProfileError
from autopart.host_memory import release_freed_memory
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.plan.build import build_plan_for
from autopart.plan.schema import Plan
from autopart.profile import Profile
from autopart.profile.saved import default_profiles_dir
from autopart.runtime.executor import Executor
from autopart.runtime.host_sharing import shared_hosts, with_sharing
from autopart.runtime.hosts import ClusterPlanExecutor, stream_through
from autopart.search.host_mix import StageMix, mix_stages
from autopart.search.hosts import LOCAL, HostStagePlan, Stage, parse_links, search_hosts
from autopart.settings import COMMON
from autopart.tuning.accuracy import (
    AccuracyPolicy,
    made_for_runtimes,
    own_runtimes,
    tolerance_peer,
)
from autopart.tuning.finite import check_reference_finite
from autopart.tuning.host_profiles import HostProfile, profile_hosts
from autopart.tuning.judge import Judge
from autopart.tuning.locate import judge_of
from autopart.tuning.options import TuneOptions
from autopart.tuning.peers import PeerInputs, peers
from autopart.tuning.whole_scale import op_sum_factor

STREAM_INPUTS = (40, 200)  # the least and most inputs of the stream each candidate runs
STREAM_S = 1.0  # which lasts about this long at its predicted rate, within those bounds
EXACT = AccuracyPolicy(("f32",))  # the plans made again where none is within the tolerance
PROFILE_BUDGET_S = 60.0  # each host's profile, where no --budget is given
Judged = tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]]  # a sample, its reference


@dataclass
class Candidate:
    """One plan (or one per replica) with its prediction and what running it measured.

    ``error`` is its drop on the tune's metric over the judged samples (max-rel without
    ``--inputs``), held to ``tolerance``: the budget on that metric.
    """

    name: str
    predicted: HostStagePlan
    plans: list[Plan]
    latency_s: float | None = None
    rate_per_s: float | None = None
    error: float | None = None
    tolerance: float = COMMON.check_tolerance

    @property
    def kept(self) -> bool:
        """Whether it ran and its drop on the metric is within its ``tolerance``."""
        return self.error is not None and self.error <= self.tolerance


@dataclass
class HostTuneReport:
    """The hosts' profiles, the network file, every candidate, the chosen one, its file."""

    profiles: list[HostProfile]
    network: Path
    candidates: list[Candidate]
    chosen: Candidate
    plan_path: Path
    notes: list[str] = field(default_factory=list)
    predicted_only: bool = False


def tune_hosts(
    graph: Graph, options: TuneOptions, announce: Callable[[str], None] | None = None
) -> HostTuneReport:
    """Take ``graph`` to a verified plan across the hosts of ``options.cluster``.

    Of ``options`` (:class:`~autopart.tuning.options.TuneOptions`), this reads the
    cluster, the objective (latency or throughput), the targets, the host memory caps,
    the profiles folder, the budget (each host's profile), the rounds (single-input runs),
    the seed, the precisions, the accuracy options (tolerance, samples, validation split,
    metric, max drop), the plan file, replan and links; the others are refused when set
    (:meth:`~autopart.tuning.options.TuneOptions.check_across_hosts`).

    A host lost on the way (:class:`HostLostError`) ends the tune with its name; with
    ``options.replan`` it is dropped instead, and the tune starts again on the hosts left
    (what they measured is kept), with a note saying so.
    """
    if options.cluster is None:
        raise AutopartError("a tune across hosts needs a cluster (--cluster)")
    objective = str(options.search.objective)
    say = announce or (lambda _: None)
    directory = Path(options.profiles_dir) if options.profiles_dir else default_profiles_dir()
    notes: list[str] = []
    given = parse_links(options.links)
    judge = judge_of(graph, options)
    with cluster(options.cluster) as hosts:
        caps = _caps(options.host_memory, [h.name for h in hosts])
        _check_hosts_named(given, _names(hosts))
        left = list(hosts)
        while True:
            try:
                profiled, path, candidates, sharing = _search_and_run(
                    graph, options, left, caps, given, directory, judge, say
                )
                break
            except HostLostError as lost:
                if not options.replan or len(left) < 2 or lost.host not in _names(left):
                    raise
                left = [h for h in left if h.name != lost.host]
                notes.append(f"{lost}; planned again on {', '.join(_names(left))} (--replan)")
                say(notes[-1])
    chosen = _choose(candidates, objective, predicted=bool(given.links))
    if sharing is not None and objective == "throughput":
        notes.append(sharing.describe())
    if not given.links:
        notes.append(f"accuracy: {options.accuracy_policy.describe(judge.metric)}; every "
                     f"candidate held to {chosen.tolerance:.3g}, {judge.metric.label} on "
                     f"{judge.describe()}")  # fmt: skip
    if given.links:
        notes.append(f"planned for the network of --link {' '.join(options.links)}: "
                     "predicted only, nothing was run")  # fmt: skip
    plan_path = Path(options.output or f"{graph.name or 'model'}-hosts.json")
    chosen.plans[0].notes.extend([*notes, _note(chosen, objective, bool(given.links))])
    chosen.plans[0].save(plan_path)
    return HostTuneReport(profiled, path, candidates, chosen, plan_path, notes, bool(given.links))


def _choose(candidates: Sequence[Candidate], objective: str, predicted: bool) -> Candidate:
    """The candidate best at ``objective``: by its prediction, or among those run and kept."""
    if predicted:
        if objective == "latency":
            return min(candidates, key=lambda c: c.predicted.latency_s)
        return max(candidates, key=lambda c: c.predicted.rate_per_s)
    kept = [c for c in candidates if c.kept]
    if not kept:
        worst = ", ".join(f"{c.name}: {c.error:.1e}" for c in candidates if c.error is not None)
        tolerance = candidates[0].tolerance if candidates else COMMON.check_tolerance
        raise AutopartError(f"no plan across the hosts is within the accuracy budget "
                            f"{tolerance:.3g} ({worst})")  # fmt: skip
    if objective == "latency":
        return min(kept, key=lambda c: c.latency_s or np.inf)
    return max(kept, key=lambda c: c.rate_per_s or 0.0)


def _check_hosts_named(given: NetworkModel, hosts: Sequence[str]) -> None:
    """Refuse a ``--link`` naming a host the cluster lacks."""
    unknown = sorted({name for pair in given.links for name in pair} - set(hosts))
    if unknown:
        raise AutopartError(f"--link names {', '.join(unknown)}, not a host of the cluster "
                            f"({', '.join(hosts)})")  # fmt: skip


def _names(hosts: Sequence[Host]) -> list[str]:
    return [host.name for host in hosts]


def _search_and_run(
    graph: Graph,
    options: TuneOptions,
    hosts: Sequence[Host],
    caps: Mapping[str, int],
    given: NetworkModel,
    directory: Path,
    judge: Judge,
    say: Callable[[str], None],
) -> tuple[list[HostProfile], Path, list[Candidate], Sharing | None]:
    """Profile ``hosts``, reuse or time their network, search, and run every candidate.

    Also returns what the hosts on this machine lose streaming together, where measured.

    Links ``given`` replace the measured ones, and then no candidate is run; the hosts are
    then priced as machines of their own, with no sharing of this machine's cores.
    Candidates are judged by ``judge`` (its metric, on its samples).
    """
    budget_s = PROFILE_BUDGET_S if options.time_budget_s is None else options.time_budget_s
    profiled = profile_hosts(graph, hosts, options.targets, directory, budget_s, say)
    fingerprints = {p.host: p.fingerprint for p in profiled}
    if not network_path(directory, fingerprints).exists():
        say("timing the network between the hosts" if len(hosts) > 1 else "timing a call")
    network, path = network_of(hosts, fingerprints, directory)
    if given.links:
        network = replace(network, sharing=None)  # a network not here: machines apart
    elif network.sharing is None and shared_hosts(hosts):
        say("timing what the hosts on this machine lose streaming together")
        network = with_sharing(network, hosts, path)
    names = set(_names(hosts))
    network = network.merged(
        NetworkModel({pair: link for pair, link in given.links.items() if set(pair) <= names})
    )
    policy = options.accuracy_policy
    costs = {p.host: _host_costs(graph, p, options.targets, policy) for p in profiled}
    say("searching across hosts")
    caps_here = {name: cap for name, cap in caps.items() if name in names}
    candidates = _candidates(graph, _mixed(graph, costs, network, caps_here))
    if given.links:
        return profiled, path, candidates, network.sharing
    feeds = random_inputs(graph, options.search.seed)
    judged = judged_samples(judge, feeds)
    tolerance = _tolerance(graph, policy, judge, judged, say)
    for candidate in candidates:
        say(f"running {candidate.name}")
        _measure(graph, candidate, hosts, feeds, options, judge, judged, tolerance)
    reduced = any(t.reduced for c in costs.values() for t in c.targets)
    if reduced and not any(c.kept for c in candidates):
        say(f"no plan within the tolerance ({tolerance:.3g}): planning again in f32")
        exact = {}
        for host in profiled:  # a host with no f32 target among those asked sits it out
            with contextlib.suppress(ProfileError):
                exact[host.host] = _host_costs(graph, host, options.targets, EXACT)
        again = []
        if exact:
            again = _candidates(graph, _mixed(graph, exact, network, caps_here), " f32")
        for candidate in again:
            say(f"running {candidate.name}")
            _measure(graph, candidate, hosts, feeds, options, judge, judged, tolerance)
        candidates += again
    return profiled, path, candidates, network.sharing


def _host_costs(
    graph: Graph, profiled: HostProfile, targets: Sequence[str] | None, policy: AccuracyPolicy
) -> Costs:
    """The host's costs on every target ``policy`` allows that its profile prices for every node.

    Each target's op costs are scaled so that they sum to its whole-model timing on the
    host, where they are off by more than the gross error
    (:func:`~autopart.tuning.whole_scale.op_sum_factor`): a library's fusion, spread over
    its ops, as a local tune's screen scales them. Launches, copies between the targets and
    edge costs are the profile's, as a local tune's costs hold them.
    """
    profile = Profile.load(profiled.path)
    factors: dict[VirtualDevice, float] = {}
    for text in targets or sorted({str(t) for t in profile_targets(profile)}):
        target = VirtualDevice.parse(text)
        if not policy.allows(target.computes_in) or target.host is not None:
            continue
        try:
            one = costs_from_profile(graph, profile, [target])
        except ProfileError:
            continue  # not profiled for every node within the budget
        whole_s = profiled.whole_s.get(str(target))
        factor = None if whole_s is None else op_sum_factor(one, target, whole_s)
        factors[target] = factor or 1.0
    if not factors:
        raise ProfileError(f"host {profiled.host}'s profile prices no target it may use for "
                           "every node; profile it with a larger --budget")  # fmt: skip
    costs = costs_from_profile(graph, profile, list(factors))
    scaled = {
        name: {t: cost * factors[t] for t, cost in entry.items() if t in factors}
        for name, entry in costs.node_cost.items()
    }
    return replace(costs, targets=list(factors), node_cost=scaled)


def _tolerance(
    graph: Graph,
    policy: AccuracyPolicy,
    judge: Judge,
    judged: Sequence[Judged],
    say: Callable[[str], None],
) -> float:
    """The largest drop a plan across hosts may have: the local tune's rule, on ``judged``.

    A budget given (or a task metric's default) is that number; else the rule's peers
    (OpenVINO as installed, and the libraries alone in f32, which floor it) run the whole
    model here on the ``judged`` samples, and their drops on ``judge``'s metric set it
    (:meth:`~autopart.tuning.accuracy.AccuracyPolicy.tolerance_rule`).
    """
    rule = policy.tolerance_rule(graph, judge.metric)
    if isinstance(rule, float):
        return rule
    errors: dict[str, float] = {}
    for name in dict.fromkeys([tolerance_peer(), *own_runtimes(), *made_for_runtimes()]):
        if name is None:
            continue
        runners, _ = peers(graph, PeerInputs.of(graph), only=name)
        if name in runners:
            say(f"judging {name} on the same samples: its drop sets the tolerance")
            runner = runners[name]
            errors[name] = _drop(judge, judged, [runner(sample) for sample, _ in judged])
        runners.clear()
        release_freed_memory()
    return rule(errors)


def judged_samples(judge: Judge, feeds: Mapping[str, np.ndarray]) -> list[Judged]:
    """The samples every candidate is judged on, each with the numpy reference's outputs.

    The timing ``feeds`` first where the judge counts them (random inputs), then the
    judge's samples: the user's validation samples, else seeded random ones. An
    :class:`~autopart.errors.InputError` where the reference computes NaN on any.
    """
    judged: list[Judged] = []
    if judge.feeds_judged:
        reference = Executor(judge.graph).run(feeds).outputs
        check_reference_finite(judge.graph, reference, "the inputs timed")
        judged.append((feeds, reference))
    judged += [(sample, judge.reference(i)) for i, sample in enumerate(judge.samples)]
    return judged


def _drop(
    judge: Judge, judged: Sequence[Judged], outputs: Sequence[Mapping[str, np.ndarray]]
) -> float:
    """The metric's drop over ``outputs``; output k is of judged sample k mod their count."""
    tallies = [
        judge.tally(judged[index % len(judged)][1], dict(got))[0]
        for index, got in enumerate(outputs)
    ]
    return judge.drop(tallies)


def _caps(memory: Mapping[str, int], hosts: Sequence[str]) -> dict[str, int]:
    """Each host's cap: its own, else ``*``'s; a cap naming no host is an error."""
    unknown = sorted(set(memory) - {*hosts, "*"})
    if unknown:
        raise AutopartError(f"--memory names {', '.join(unknown)}, not a host of the cluster "
                            f"({', '.join(hosts)})")  # fmt: skip
    return {h: memory.get(h, memory["*"]) for h in hosts if h in memory or "*" in memory}


def _mixed(
    graph: Graph, costs: Mapping[str, Costs], network: NetworkModel, caps: Mapping[str, int]
) -> list[tuple[str, HostStagePlan]]:
    """The host search's plans by name, each followed by its stages' targets mixed, if quicker.

    ``quickest`` (one input), ``pipeline`` (a stream), ``replicas`` where two hosts hold
    the whole graph; ``<name> mixed`` where :func:`~autopart.search.host_mix.mix_stages`
    predicts a stage quicker on a mix of its host's targets.
    """
    latency, rate, replicas = search_hosts(graph, costs, network, caps)
    named: list[tuple[str, HostStagePlan]] = []
    memo: dict[Stage, StageMix | None] = {}
    for name, plan in (("quickest", latency), ("pipeline", rate), ("replicas", replicas)):
        if plan is None:
            continue
        named.append((name, plan))
        mixed = mix_stages(graph, plan, costs, network, memo=memo)
        if mixed is not None:
            named.append((f"{name} mixed", mixed))
    return named


def _candidates(
    graph: Graph, named: Sequence[tuple[str, HostStagePlan]], suffix: str = ""
) -> list[Candidate]:
    """The distinct plans of ``named`` to run, in order, each name with ``suffix`` added."""
    found: dict[tuple[object, ...], Candidate] = {}
    for name, predicted in named:
        assignments = predicted.assignments(graph)
        key = (predicted.kind, *(tuple(sorted(a.items())) for a in assignments))
        if key in found:
            continue
        plans = [
            build_plan_for(graph, {n: VirtualDevice.parse(t) for n, t in a.items()},
                           _first_target(a), str(graph.meta.get("source") or graph.name))
            for a in assignments
        ]  # fmt: skip
        found[key] = Candidate(name + suffix, predicted, plans)
    return list(found.values())


def _first_target(assignment: Mapping[str, str]) -> VirtualDevice:
    """The first node's target on the local machine: a plan's fallback names no host."""
    return replace(VirtualDevice.parse(next(iter(assignment.values()))), host=None)


def _measure(graph: Graph, candidate: Candidate, hosts: Sequence[Host],
             feeds: Mapping[str, np.ndarray], options: TuneOptions, judge: Judge,
             judged: Sequence[Judged], tolerance: float) -> None:  # fmt: skip
    """Run ``candidate`` on ``hosts``: its latency on ``feeds``, a stream's rate, its drop.

    The stream (:data:`STREAM_INPUTS`, lasting about :data:`STREAM_S` at the predicted
    rate) cycles through the ``judged`` samples, and its outputs, with one run of each
    sample alone, are judged against their references on ``judge``'s metric.
    """
    executors = [ClusterPlanExecutor(plan, graph, hosts) for plan in candidate.plans]
    try:
        run = executors[0].run(feeds, repeat=options.rounds, warmup=2)
        alone = [executors[0].run(sample).outputs for sample, _ in judged]
        least, most = STREAM_INPUTS
        count = min(most, max(least, math.ceil(STREAM_S * candidate.predicted.rate_per_s)))
        cycled = [judged[index % len(judged)][0] for index in range(count)]
        streamed = stream_through(executors, cycled,
                                  in_flight=sum(len(e.stages) for e in executors) + 1)  # fmt: skip
        candidate.error = _drop(judge, judged, [*alone, *streamed.outputs])
        candidate.latency_s, candidate.rate_per_s = run.median_s, streamed.rate
        candidate.tolerance = tolerance
    finally:
        for executor in executors:
            executor.close()


def _note(chosen: Candidate, objective: str, predicted: bool) -> str:
    """The saved plan's note: what was chosen across hosts, and why."""
    hosts = ", ".join(dict.fromkeys(stage[0] for stage in chosen.predicted.stages))
    replicas = " (run one copy per host: replicas)" if chosen.predicted.kind == "replicas" else ""
    how = "predicted" if predicted else "measured"
    return (f"tune --cluster chose {chosen.name} on {hosts} by {how} {objective}{replicas}; "
            f"{LOCAL} is the host that runs the command")  # fmt: skip
