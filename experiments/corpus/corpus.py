"""The corpus: every manifest of this folder read as one frozen list of models.

Each ``*.toml`` manifest here (``wheels``, ``torchvision``, ``transformers``, ``onnx``,
``heldout``) lists ``[[model]]`` tables in the format of SCHEMA.md; each model is one file
``cache/<name>.onnx`` (git-ignored; ``fetch.py`` makes it). ``FROZEN`` records when the
list was frozen: nothing may be added or dropped to suit results after that.

:func:`make_inputs` builds a model's inputs from its input specs (seeded), and
:meth:`CorpusModel.cli_arguments` gives the ``--input-shape`` and ``--freeze`` options that
import it as those inputs describe.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
CACHE = HERE / "cache"
MANIFESTS = ("wheels", "torchvision", "transformers", "onnx", "heldout")
FROZEN = HERE / "FROZEN"


@dataclass(frozen=True)
class InputSpec:
    """One graph input: its static shape, dtype and value domain (SCHEMA.md)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    domain: str
    freeze: bool = False
    note: str = ""

    def frozen_value(self) -> float | int:
        """The value of a ``value:V`` domain (a frozen input's), as its dtype's kind."""
        kind, _, rest = self.domain.partition(":")
        if kind != "value":
            raise ValueError(f"input {self.name} is frozen but its domain {self.domain} is not")
        number = float(rest)
        return int(number) if np.dtype(self.dtype).kind in "iub" else number


@dataclass(frozen=True)
class CorpusModel:
    """One model of the corpus: where it comes from, its file's hash, its input specs."""

    name: str
    source: str
    family: str
    description: str
    licence: str
    sha256: str
    size: int
    manifest: str
    inputs: tuple[InputSpec, ...]
    dynamic: str = ""
    package: str = ""
    version: str = ""
    member: str = ""
    recipe: str = ""
    exporter: str = ""

    def path(self, cache: Path = CACHE) -> Path:
        """Where the model's ``.onnx`` file lives."""
        return cache / f"{self.name}.onnx"

    def origin(self) -> str:
        """Where it comes from, in one phrase (package==version, recipe and exporter, ...)."""
        if self.source == "wheel":
            return f"{self.package}=={self.version}"
        if self.source == "torch":
            return f"{self.recipe} ({self.exporter})"
        return self.recipe or self.member or self.source

    def cli_arguments(self) -> list[str]:
        """``--input-shape NAME=D,...`` for every input, ``--freeze NAME=V`` for frozen ones."""
        arguments: list[str] = []
        for spec in self.inputs:
            if spec.freeze:
                arguments += ["--freeze", f"{spec.name}={spec.frozen_value()}"]
            elif spec.shape:
                arguments += ["--input-shape", f"{spec.name}={','.join(map(str, spec.shape))}"]
        return arguments

    def frozen(self) -> dict[str, float | int]:
        """The frozen inputs' values, by name (the API's ``freeze=``)."""
        return {spec.name: spec.frozen_value() for spec in self.inputs if spec.freeze}

    def input_shapes(self) -> dict[str, list[int]]:
        """The static shape of every input that is not frozen (the API's ``input_shapes=``)."""
        return {spec.name: list(spec.shape) for spec in self.inputs if not spec.freeze}


def _model(entry: dict[str, Any], manifest: str) -> CorpusModel:
    specs = tuple(
        InputSpec(
            name=str(i["name"]),
            shape=tuple(int(d) for d in i.get("shape", [])),
            dtype=str(i["dtype"]),
            domain=str(i["domain"]),
            freeze=bool(i.get("freeze", False)),
            note=str(i.get("note", "")),
        )
        for i in entry.get("input", [])
    )
    known = {f for f in CorpusModel.__dataclass_fields__ if f not in {"inputs", "manifest"}}
    fields = {key: value for key, value in entry.items() if key in known}
    return CorpusModel(**fields, manifest=manifest, inputs=specs)


def load_corpus(directory: Path = HERE) -> list[CorpusModel]:
    """Every model of every manifest present, in manifest order; names must be unique."""
    models: list[CorpusModel] = []
    for manifest in MANIFESTS:
        path = directory / f"{manifest}.toml"
        if path.exists():
            data = tomllib.loads(path.read_text())
            models += [_model(entry, manifest) for entry in data.get("model", [])]
    names = [m.name for m in models]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"names listed twice in the corpus: {', '.join(duplicated)}")
    return models


def select(models: list[CorpusModel], names: list[str]) -> list[CorpusModel]:
    """The models named, or whose name starts with a name ending in ``*`` (all if none)."""
    if not names:
        return list(models)
    chosen = [
        m
        for m in models
        if any(m.name == n or (n.endswith("*") and m.name.startswith(n[:-1])) for n in names)
    ]
    if not chosen:
        raise KeyError(f"no corpus model matches {', '.join(names)}")
    return chosen


def make_inputs(model: CorpusModel, seed: int = 0) -> dict[str, np.ndarray]:
    """The model's inputs drawn from their domains (SCHEMA.md), seeded by ``seed``."""
    rng = np.random.default_rng(seed)
    return {spec.name: draw(spec, rng) for spec in model.inputs}


def draw(spec: InputSpec, rng: np.random.Generator) -> np.ndarray:
    """One input of ``spec``'s shape and dtype, drawn from its domain."""
    kind, _, rest = spec.domain.partition(":")
    shape, dtype = spec.shape, np.dtype(spec.dtype)
    if kind == "normal":
        values: Any = rng.standard_normal(shape)
    elif kind == "uniform":
        low, high = (float(x) for x in rest.split(":"))
        values = rng.uniform(low, high, shape)
    elif kind == "int":
        low, high = (int(float(x)) for x in rest.split(":"))
        values = rng.integers(low, max(high, low + 1), shape)
    elif kind == "value":
        values = np.full(shape, float(rest))
    elif kind == "zeros":
        values = np.zeros(shape)
    elif kind == "bool":
        values = rng.random(shape) < float(rest or 0.5)
    else:
        raise ValueError(f"input {spec.name}: unknown domain {spec.domain!r}")
    return np.asarray(values).astype(dtype)


def sha256_of(path: Path) -> str:
    """The hex sha256 of the file at ``path``."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def problem(model: CorpusModel, cache: Path = CACHE) -> str | None:
    """Why the model's cached file is not the frozen one (missing, another sha256), else None."""
    path = model.path(cache)
    if not path.exists():
        return "missing"
    actual = sha256_of(path)
    if actual != model.sha256:
        return f"sha256 {actual[:12]}... is not the frozen {model.sha256[:12]}..."
    return None


def run_cli(command: list[str], timeout: float) -> dict[str, Any]:
    """One command-line call's outcome: ``status``, ``detail``, ``seconds`` and ``stderr``.

    ``ok`` (exit 0), ``refused`` (exit 2 with an ``error:`` line and no traceback: the
    detail is that line), ``crash`` (any other exit: the detail is its last line) or
    ``timeout`` (no answer within ``timeout`` seconds; no ``seconds``, ``stdout`` nor
    ``stderr``).
    """
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "detail": f"no answer in {timeout:.0f} s"}
    seconds = time.perf_counter() - started
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    found = {"seconds": seconds, "stderr": done.stderr, "stdout": done.stdout}
    if done.returncode == 2 and errors and "Traceback" not in done.stderr:
        return {"status": "refused", "detail": errors[0][:300], **found}
    if done.returncode != 0:
        return {"status": "crash", "detail": crash_detail(done.returncode, done.stderr), **found}
    return {"status": "ok", "detail": "", **found}


def crash_detail(code: int, stderr: str) -> str:
    """``exit CODE: <the last line of stderr>``, as the experiments report a crash."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return f"exit {code}: {lines[-1][:300] if lines else 'no message'}"


def save_rows(rows: list[dict[str, Any]], csv: Path) -> None:
    """Write ``rows`` to ``csv`` atomically (a stopped run keeps the rows written so far).

    pandas is imported here: the exporters' torch environment imports this module too.
    """
    import pandas as pd

    partial = csv.with_suffix(".csv.part")
    pd.DataFrame(rows).to_csv(partial, index=False)
    partial.replace(csv)


def peer_targets() -> str:
    """The targets the peers stand for on this machine, comma-separated for ``--targets``.

    Each peer that amounts to a plan (onnxruntime alone, OpenVINO as installed and in
    f32) stands for its codegen on the whole CPU at its own precision, which depends on
    the CPU (OpenVINO as installed: bf16 only where the CPU has it), so the list is read
    off this machine, never written down.
    """
    from autopart.targets.registry import declared_peers

    targets = []
    for peer in declared_peers(available=True):
        if peer.stands_for_plan:
            precision = peer.precision()
            target = f"cpu@{peer.codegen}" + (f":{precision}" if precision else "")
            if target not in targets:
                targets.append(target)
    return ",".join(targets)
