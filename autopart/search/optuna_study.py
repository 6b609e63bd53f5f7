"""The optuna search's studies: the in-memory study the sampler uses, mirroring a stored one.

Each trial stores its assignment as target indices (``user_attrs["assignment"]``) against the
node and target lists kept in the study's ``user_attrs``, so any worker can rebuild the best
plan from storage. The sampler works on an in-memory study; finished trials go to the stored
study (any optuna RDB URL, so several processes can share one) as values and user attributes
only, and each worker pulls the others' finished trials before every trial.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
import sqlalchemy.exc
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, Trial, TrialState

from autopart.costmodel.costs import Costs
from autopart.errors import AutopartError
from autopart.interrupts import interrupt_taken
from autopart.io import check_writable
from autopart.ir.hashing import graph_hash
from autopart.search.options import Objective
from autopart.search.optuna_space import Codes, SearchSpace

CREATE_ATTEMPTS = 20  # workers racing to create a new study
# what a worker sees when another created the same tables or rows a moment before it
RACE_SIGNS = ("already exists", "locked", "duplicate", "unique")
STUDY_ATTR = "autopart"  # the study's user attribute that holds the search space


class OptunaSearchError(AutopartError):
    """An optuna search cannot start or finish: bad seeds, a study of another model, no trial."""


class StudyStorageError(OptunaSearchError):
    """The study's database is damaged, read-only or on a full disk (its file is named)."""


# What optuna and SQLAlchemy raise for a database that is damaged, read-only or full, and
# what optuna's readers raise on rows they cannot read: a NULL value, bad JSON in an
# attribute, a trial whose values went with a dropped table.
STORAGE_FAILURES = (
    optuna.exceptions.StorageInternalError,
    sqlalchemy.exc.SQLAlchemyError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AssertionError,
)


@contextmanager
def storage_errors(where: str) -> Iterator[None]:
    """Turn a failure of the study storage ``where`` within into :class:`StudyStorageError`.

    ``where`` names it (:func:`describe_storage`). The message says whether the database
    is read-only, on a full disk or damaged, with the database's own first line. After an
    interrupt, a failure is its consequence (SQLAlchemy refuses a session it cut short), and
    the interrupt is raised again instead, so that its cleanup runs and says what was kept.
    """
    try:
        yield
    except AutopartError:
        raise
    except STORAGE_FAILURES as error:
        interrupt = interrupt_taken()
        if interrupt is not None:  # the interrupt cut a database call short: it is that
            raise interrupt from error
        cause: BaseException = error
        while cause.__cause__ is not None:  # optuna wraps the database's own words
            cause = cause.__cause__
        cause = getattr(cause, "orig", None) or cause  # SQLAlchemy wraps them too
        detail = (str(cause).strip().splitlines() or [type(cause).__name__])[0][:200]
        text = detail.lower()
        if "readonly" in text or "read-only" in text:
            problem = "is read-only"
        elif "full" in text:
            problem = "cannot grow: the disk is full"
        else:
            problem = "is damaged"
        raise StudyStorageError(f"the {where} {problem} ({detail})") from None


def sqlite_file(storage: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (a ``file:`` URI's too); None for other storage."""
    try:
        url = sqlalchemy.engine.make_url(storage)
    except (sqlalchemy.exc.ArgumentError, ValueError):
        return None
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:"):
        database = database.removeprefix("file:").partition("?")[0]
    return Path(database)


def describe_storage(storage: str) -> str:
    """How messages name the storage at URL ``storage``: its file, or its URL sans password."""
    path = sqlite_file(storage)
    return f"study database {path}" if path is not None else f"study storage {_safe_url(storage)}"


class StudyMirror:
    """The in-memory study the sampler works on, mirroring the stored study (if any).

    Sampling against a database costs queries per parameter and trial; here only finished
    trials cross, as values and user attributes (the assignment) without optuna parameters,
    which cost a row each. Each trial is stored once told; finished trials of other workers
    (or earlier calls) are pulled in before every trial, their parameters rebuilt from the
    assignment.
    """

    def __init__(
        self,
        stored: optuna.Study | None,
        space: SearchSpace,
        objective: Objective,
        where: str = "study storage",
    ) -> None:
        self.stored = stored
        self.where = where
        self.space = space
        self.distributions: dict[str, BaseDistribution] = {
            space.name(g): CategoricalDistribution(space.labels(g))
            for g in range(len(space.groups))
        }
        self.local = optuna.create_study(directions=_directions(objective))
        self.objective = objective
        self.token = uuid.uuid4().hex
        self.seen: set[int] = set()
        self.pull()

    def pull(self) -> None:
        """Add the stored study's finished trials this worker has not seen yet.

        Raises :class:`StudyStorageError` when the storage fails or holds damaged trials.
        """
        if self.stored is None:
            return
        with storage_errors(self.where):
            self._pull(self.stored)

    def _pull(self, stored: optuna.Study) -> None:
        finished = stored.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        fresh = [
            trial
            for trial in finished
            if trial.number not in self.seen
            and trial.user_attrs.get("worker") != self.token
            and trial_codes(trial) is not None
        ]
        self.seen.update(trial.number for trial in finished)
        for trial in fresh:
            codes = trial_codes(trial)
            assert codes is not None
            self.local.add_trial(
                optuna.trial.create_trial(
                    values=trial.values,
                    params=self.space.encode(codes),
                    distributions=self.distributions,
                    user_attrs=trial.user_attrs,
                )
            )

    def tell(self, trial: Trial, values: tuple[float, ...]) -> None:
        """Finish ``trial`` with ``values`` and store it."""
        trial.set_user_attr("worker", self.token)
        told = self.local.tell(trial, list(values) if self.objective == "pareto" else values[0])
        if self.stored is not None:
            with storage_errors(self.where):
                self.stored.add_trial(
                    optuna.trial.create_trial(
                        values=told.values,
                        user_attrs={
                            k: v for k, v in told.user_attrs.items() if k != "seed_assignment"
                        },
                    )
                )

    def finished(self) -> int:
        """Finished trials in the stored study (the local one without storage)."""
        study = self.stored if self.stored is not None else self.local
        with storage_errors(self.where):
            return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def trial_codes(trial: FrozenTrial) -> Codes | None:
    """The target indices a finished trial recorded (None: not an autopart trial)."""
    codes = trial.user_attrs.get("assignment")
    return tuple(codes) if codes is not None else None


def default_study_name(costs: Costs, objective: Objective) -> str:
    """The study name used when none is given: the objective and the graph's hash."""
    return f"autopart-{objective}-{graph_hash(costs.graph)[:12]}"


def _backend(storage: str) -> optuna.storages.RDBStorage:
    """The RDB storage at URL ``storage``, its tables made; one-line errors, safe to race.

    Workers started together on a new database all try to create its tables; the losers
    of that race see an IntegrityError, a table that already exists or a locked SQLite
    file, and try again.
    """
    engine: dict[str, Any] = {}
    if storage.startswith("sqlite:"):
        _check_folder(storage)
        engine = {"connect_args": {"timeout": 60}}
    for attempt in range(CREATE_ATTEMPTS):
        try:
            return optuna.storages.RDBStorage(storage, engine_kwargs=engine)
        except sqlalchemy.exc.DBAPIError as error:
            racing = isinstance(error, sqlalchemy.exc.IntegrityError) or any(
                sign in str(error).lower() for sign in RACE_SIGNS
            )
            if not racing or attempt == CREATE_ATTEMPTS - 1:
                raise OptunaSearchError(_storage_failure(storage, error)) from None
            time.sleep(0.05 * (attempt + 1))
        except (ImportError, ValueError, sqlalchemy.exc.SQLAlchemyError) as error:
            raise OptunaSearchError(_storage_failure(storage, error)) from None
    raise OptunaSearchError(f"cannot open the study storage {_safe_url(storage)}")


def _check_folder(storage: str) -> None:
    """Refuse a SQLite file in a folder that does not exist (it is never made)."""
    path = sqlite_file(storage)
    if path is not None and not path.parent.is_dir():
        raise OptunaSearchError(
            f"the folder of the study database {path} does not exist: create it first"
        )


def _safe_url(storage: str) -> str:
    """``storage`` with any password replaced, for messages."""
    try:
        return sqlalchemy.engine.make_url(storage).render_as_string(hide_password=True)
    except (sqlalchemy.exc.ArgumentError, ValueError):
        return storage


def _storage_failure(storage: str, error: BaseException) -> str:
    detail = str(error).strip().splitlines()
    return f"cannot open the study storage {_safe_url(storage)}: {detail[0] if detail else error}"


def check_storage(storage: str) -> None:
    """Open ``storage`` and read its studies and trials, so that it fails before any work.

    Raises :class:`OptunaSearchError` for a bad URL or a database that cannot be opened,
    :class:`~autopart.errors.OutputError` for a SQLite file that cannot be written (read-only,
    a folder) and :class:`StudyStorageError` for studies that cannot be read.
    """
    path = sqlite_file(storage)
    if path is not None:
        _check_folder(storage)
        check_writable(path, "study database")
    backend = _backend(storage)
    try:
        with storage_errors(describe_storage(storage)):
            for study in backend.get_all_studies():
                study_id = backend.get_study_id_from_name(study.study_name)
                backend.get_all_trials(study_id, deepcopy=False)
    finally:
        backend.engine.dispose()


def open_study(storage: str | None, name: str, objective: Objective) -> optuna.Study | None:
    """The stored study ``name`` at the RDB URL ``storage``, created if new (None: no storage).

    Raises :class:`StudyStorageError` when the storage fails or its records are damaged.
    """
    if storage is None:
        return None
    backend = _backend(storage)
    with storage_errors(describe_storage(storage)):
        return _open(backend, name, objective)


def _open(backend: optuna.storages.RDBStorage, name: str, objective: Objective) -> optuna.Study:
    directions = _directions(objective)
    for attempt in range(CREATE_ATTEMPTS):
        try:
            study = optuna.create_study(
                storage=backend, study_name=name, directions=directions, load_if_exists=True
            )
            break
        except (sqlalchemy.exc.IntegrityError, optuna.exceptions.DuplicatedStudyError):
            if attempt == CREATE_ATTEMPTS - 1:
                raise OptunaSearchError(f"cannot create study {name!r} in the storage") from None
            time.sleep(0.05 * (attempt + 1))
    if len(study.directions) != len(directions):
        raise OptunaSearchError(f"study {name!r} was made for another objective")
    return study


def check_or_store(
    study: optuna.Study, space: SearchSpace, meta: dict[str, Any], where: str = "study storage"
) -> SearchSpace:
    """Store the search space in a new study; in a stored one, check it and use its groups.

    Raises :class:`StudyStorageError` naming ``where`` when the storage fails or the stored
    space is damaged, :class:`OptunaSearchError` when it is another model's.
    """
    with storage_errors(where):
        return _check_or_store(study, space, meta)


def _check_or_store(study: optuna.Study, space: SearchSpace, meta: dict[str, Any]) -> SearchSpace:
    stored = study.user_attrs.get(STUDY_ATTR)
    if stored is None:
        if study.get_trials(deepcopy=False):
            raise OptunaSearchError(f"study {study.study_name!r} was not made by autopart")
        study.set_user_attr(STUDY_ATTR, meta)
        return space
    for key in ("objective", "nodes", "targets", "supported"):
        if stored.get(key) != meta[key]:
            what = "constraints" if key == "supported" else key.replace("_", " ")
            raise OptunaSearchError(
                f"study {study.study_name!r} was made for other {what}; use a new study name"
            )
    groups = [list(g) for g in stored["groups"]]
    choices = [list(c) for c in stored["choices"]]
    return SearchSpace(space.nodes, space.targets, groups, choices, space.fixed)


def make_sampler(objective: Objective, seed: int) -> optuna.samplers.BaseSampler:
    """NSGA-II for the Pareto front, else univariate TPE, seeded with ``seed``."""
    if objective == "pareto":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, multivariate=False)


def _directions(objective: Objective) -> list[StudyDirection]:
    """Minimise the one value, or both of the Pareto front's (makespan, peak memory)."""
    return [StudyDirection.MINIMIZE] * (2 if objective == Objective.PARETO else 1)
