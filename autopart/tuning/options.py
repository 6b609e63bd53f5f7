"""What a tune or a benchmark is asked for: one option model for both, and the search's.

Each option is stated once. :class:`ModelOptions` holds what a tune and a benchmark share
(targets, rounds, folders, input shapes, frozen inputs, the memory limit) and the search
options (:attr:`ModelOptions.search`, a :class:`~autopart.search.options.SearchOptions`,
which also holds the precisions allowed and the tolerance); :class:`TuneOptions` and
:class:`BenchOptions` add only what is theirs. The command line and the API build them, and
the tune hands ``search`` to the search with only what it learns on the way filled in
(:data:`SET_BY_TUNE`). ``TuneOptions.build(objective="makespan", rounds=3)``,
``BenchOptions.build(precision="f32")``, ``autopart.tune(model, objective=...)`` and
``autopart.bench(models, tolerance=...)`` take the fields of both as flat keywords.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from autopart.errors import AutopartError
from autopart.io import check_writable
from autopart.loader import FreezeValues, InputShapes
from autopart.search.options import (
    Method,
    Objective,
    SearchOptions,
    check_budget,
    check_count,
)
from autopart.tuning.accuracy import AccuracyPolicy
from autopart.tuning.judge import Dataset, check_validation_split
from autopart.tuning.metrics import ScoreFunction, parse_metric
from autopart.tuning.settings import SCREEN

_ACROSS_HOSTS = (Objective.LATENCY, Objective.THROUGHPUT)
# The fields of SearchOptions a tune fills in itself, from the graph and the measurements.
SET_BY_TUNE = frozenset({"study_name", "source", "accuracy", "cap_s"})
# The fields of SearchOptions a user sets, as keywords of TuneOptions.build and autopart.tune.
SEARCH_FIELDS = tuple(
    f.name for f in dataclasses.fields(SearchOptions) if f.name not in SET_BY_TUNE
)


@dataclass(frozen=True)
class ModelOptions:
    """What a tune and a benchmark share: one statement of each option, every one defaulted.

    ``targets`` are target specs (None: every target found here, or in a given profile).
    ``search`` holds what the search is asked for (:class:`SearchOptions`): the objective
    and method, the search's own time bound, the constraints (pins, forbids, a fallback,
    which joins explicit ``targets``, and memory caps), the seed (also of the inputs the
    plans run on), the optuna storage (None: the study in the search folder), the
    precisions allowed and the tolerance (see :mod:`autopart.tuning.accuracy`).
    ``profiles_dir`` is where this machine's profile is kept (None: the default); plans are
    saved under ``search_dir/<model>-<targets hash>/``. ``rounds`` are the timed rounds per
    plan; ``input_shapes`` fixes input shapes (an input's name to its shape, or a symbolic
    dim's name to its size) and ``freeze`` fixes inputs to values (see
    :func:`autopart.loader.load_model`). ``memory_limit`` holds the command to that many
    bytes of resident memory (:func:`autopart.limits.memory_limit`; None: what the machine
    has free).

    Accuracy (:mod:`autopart.tuning.judge`): ``dataset`` holds the user's samples (an
    ``.npz`` with a leading sample axis, a folder of ``.npz`` files, or an iterable of
    feeds; None: seeded random inputs stand in), split into calibration and validation
    samples, ``validation_split`` of them validated. ``metric`` judges the plans on them
    (a name of :data:`~autopart.tuning.metrics.METRIC_NAMES` or a score function; None:
    :func:`~autopart.tuning.metrics.metric_for`'s default) and ``max_drop`` is the largest
    drop in it allowed (None: the metric's default budget;
    ``max-rel``'s is ``search.tolerance``).
    """

    targets: Sequence[str] | None = None
    search: SearchOptions = field(default_factory=SearchOptions)
    profiles_dir: str | Path | None = None
    search_dir: str | Path = "search"
    rounds: int = 10
    input_shapes: InputShapes | None = None
    freeze: FreezeValues | None = None
    memory_limit: int | None = None
    dataset: Dataset | None = None
    validation_split: float = 0.5
    metric: str | ScoreFunction | None = None
    max_drop: float | None = None

    def __post_init__(self) -> None:
        check_count(self.rounds, "rounds", 1)
        check_validation_split(self.validation_split)
        if self.dataset is not None and not isinstance(self.dataset, str | Path):
            object.__setattr__(self, "dataset", tuple(dict(s) for s in self.dataset))
        self.accuracy_policy  # noqa: B018 - a bad metric or budget fails here, not mid-tune
        if self.memory_limit is not None:
            check_count(self.memory_limit, "memory-limit", 1)
        if self.search.objective == Objective.THROUGHPUT and not self.across_hosts:
            raise AutopartError("--objective throughput plans a stream across hosts: "
                                "give --cluster")  # fmt: skip

    @property
    def across_hosts(self) -> bool:
        """Whether these options plan across the hosts of a cluster (only a tune's can)."""
        return False

    @classmethod
    def build(cls, **fields: Any) -> Self:
        """Options from flat keywords: those of :data:`SEARCH_FIELDS` go into ``search``.

        E.g. ``TuneOptions.build(objective="makespan", seed=3, rounds=2)`` or
        ``BenchOptions.build(precision="f32")``. An unknown keyword raises TypeError; a bad
        value :class:`~autopart.errors.AutopartError`.
        """
        return cls().updated(**fields)

    def updated(self, **fields: Any) -> Self:
        """A copy with ``fields`` replaced, the search's (:data:`SEARCH_FIELDS`) in ``search``.

        A ``search`` keyword replaces the whole search options first. An unknown keyword
        (one of :data:`SET_BY_TUNE` included) raises TypeError.
        """
        searched = {name: fields.pop(name) for name in SEARCH_FIELDS if name in fields}
        search = fields.pop("search", self.search)
        if searched:
            search = dataclasses.replace(search, **searched)
        return dataclasses.replace(self, search=search, **fields)

    @property
    def accuracy_policy(self) -> AccuracyPolicy:
        """The precisions allowed and the tolerance."""
        return AccuracyPolicy(
            self.search.precision, self.search.tolerance, parse_metric(self.metric), self.max_drop
        )

    def shared(self) -> dict[str, Any]:
        """The fields of :class:`ModelOptions` by name, to build the other command's options."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(ModelOptions)}


@dataclass(frozen=True)
class TuneOptions(ModelOptions):
    """The options of a tune (``autopart tune``): :class:`ModelOptions`, and these.

    ``profile_file`` plans from that profile instead of profiling here (another machine's:
    nothing runs). The plan is also saved to ``output`` if given. With ``peers`` (the
    default) onnxruntime alone and openvino alone, each at its library's defaults, run in
    the same rounds as the candidate plans on the original model (fed the frozen values),
    and the report gives the chosen plan's ratio to them. Unless ``thorough``, the targets
    are screened first (:mod:`autopart.tuning.screen`): only those that could beat the
    quickest whole model are profiled in full and searched. ``time_budget_s`` is the wall
    time of the whole tune (``--budget``; None: the default, :attr:`wall_budget_s`), shared
    out by :mod:`autopart.tuning.clock`; ``search.budget_s`` further bounds the search alone.
    ``started`` is when the command began, on the :func:`time.perf_counter` clock, for the
    budget to count from (None: when the tune is called; the CLI's is its process's start).

    Across hosts (``tune --cluster``, :mod:`autopart.tuning.hosts_tune`): ``cluster`` is a
    Ray cluster (``local:N`` or an address); the objective is ``latency`` or
    ``throughput``; ``host_memory`` caps the weights of a host (by name, or ``*`` for
    every host); ``time_budget_s`` bounds each host's profile (None: 60 s); ``rounds`` are
    the single-input runs of each candidate; ``replan`` drops a host lost on the way and
    plans on the hosts left; ``links`` (``A-B=BANDWIDTH,LATENCY``) plan for a network that
    is not here, and then nothing runs.
    """

    profile_file: str | Path | None = None
    output: str | Path | None = None
    peers: bool = True
    thorough: bool = False
    time_budget_s: float | None = None
    started: float | None = None
    cluster: str | None = None
    host_memory: Mapping[str, int] = field(default_factory=dict)
    replan: bool = False
    links: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.time_budget_s is not None:
            check_budget(self.time_budget_s, "budget")
        links = (self.links,) if isinstance(self.links, str) else self.links  # one link, as a str
        object.__setattr__(self, "links", tuple(links))
        if self.cluster is None and (self.replan or self.links or self.host_memory):
            raise AutopartError("replan, links and host memory caps plan across hosts: "
                                "give a cluster (--cluster)")  # fmt: skip
        if self.cluster is not None and self.search.objective not in _ACROSS_HOSTS:
            raise AutopartError(f"--objective {self.search.objective} is not one across "
                                f"hosts: {', '.join(_ACROSS_HOSTS)}")  # fmt: skip
        if self.cluster is not None:
            self.check_across_hosts()

    def check_across_hosts(self) -> None:
        """Refuse the options a tune across hosts does not use, rather than drop them.

        Raises :class:`~autopart.errors.AutopartError` naming each option set (by its
        command-line name) that :func:`~autopart.tuning.hosts_tune.tune_hosts` would not
        read: a saved profile to plan from, the peers' and the exhaustive switches, a
        memory limit, pins, forbids, a fallback or device memory caps, the search method,
        its storage and its own budget.
        """
        search, constraints = self.search, self.search.constraints
        unused = {
            "--profile": self.profile_file is not None,
            "--no-peers": not self.peers,
            "--thorough": self.thorough,
            "--memory-limit": self.memory_limit is not None,
            "--pin": bool(constraints and constraints.pins),
            "--forbid": bool(constraints and constraints.forbids),
            "--fallback": bool(constraints and constraints.fallback),
            "--memory DEVICE=SIZE": bool(constraints and constraints.memory),
            "--search": search.method != Method.AUTO,
            "--storage": search.storage is not None,
            "search budget_s": search.budget_s is not None,
        }
        named = [name for name, given in unused.items() if given]
        if named:
            raise AutopartError(f"{', '.join(named)}: not used by a tune across hosts "
                                "(--cluster); leave them out")  # fmt: skip

    @property
    def across_hosts(self) -> bool:
        """Whether these options plan across the hosts of a cluster (``cluster`` given)."""
        return self.cluster is not None

    @property
    def wall_budget_s(self) -> float | None:
        """The tune's wall-time budget in seconds (None: no bound).

        The one given, else none when ``thorough`` (the exhaustive tune), else
        :attr:`~autopart.tuning.settings.ScreenSettings.budget_s`.
        """
        if self.time_budget_s is not None:
            return self.time_budget_s
        return None if self.thorough else SCREEN.budget_s

    def check_outputs(self) -> None:
        """Raise :class:`~autopart.errors.InputError` for an output that cannot be written."""
        check_writable(self.search_dir, "search folder", directory=True)
        if self.output is not None:
            check_writable(self.output, "plan file")
        if self.profiles_dir is not None and self.profile_file is None:
            check_writable(self.profiles_dir, "profiles folder", directory=True)


@dataclass(frozen=True)
class BenchOptions(ModelOptions):
    """The options of a benchmark (``autopart bench``): :class:`ModelOptions`, 15 rounds.

    The tuned plan is looked up under ``search_dir`` (as ``autopart tune`` saves it; a
    tune at its defaults saves it there first where there is none); the options apply to
    every model benched. ``baselines`` False times only the peers and the tuned plan (twice,
    for the noise floor): nothing is profiled beyond what the tune itself needs, so no
    single target, provider rule, per-op-best or HEFT row, and ``vs_best_single`` is NaN.
    """

    rounds: int = 15
    baselines: bool = True
