"""Write the manifests of the corpus's local sources: onnx's own models and the held-out suite.

``onnx.toml``: every model of onnx's ``backend/test/data/light`` networks, with the
seeded random weights autopart's zoo materialises (``autopart.zoo.load_zoo_model(name)``,
seed 0), written to ``cache/onnx_<name>.onnx``. ``heldout.toml``: every model of the
frozen held-out suite (``experiments/heldout/suite.toml``), read from its cache, as
``heldout_<name>``. The rule for input domains, the same for both: a frozen input is
``value:V``; a float input is ``normal`` unless the suite names its domain below; an
integer input used as Gather indices is ``int:0:N`` (N the table's size), other integers
and booleans ``int:0:2``. The held-out suite's own preprocessing fixes the domains below
(audio in [-1, 1], byte values, zero recurrent state).

    python experiments/corpus/local_manifests.py     # (re)write onnx.toml and heldout.toml
    python experiments/corpus/local_manifests.py --keep-manifest   # the files only

``fetch.py`` runs it with ``--keep-manifest``: the frozen manifests stay as they are, and
a file whose bytes differ (seeded weights rescaled by BLAS products differ in their last
bits on another CPU) shows as a sha256 mismatch, never as a new frozen sha256.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "heldout"))

from corpus import CACHE, sha256_of  # noqa: E402
from suite import CACHE as HELDOUT_CACHE  # noqa: E402
from suite import load_suite  # noqa: E402

from autopart.ir.onnx_import import load_graph  # noqa: E402
from autopart.zoo import load_zoo_model, zoo_names  # noqa: E402

# Domains the held-out models' own packages feed (their preprocessing), by (model, input).
HELDOUT_DOMAINS = {
    ("silero_vad", "input"): ("uniform:-1:1", "16 kHz audio samples in [-1, 1]"),
    ("silero_vad", "state"): ("zeros", "the package starts every stream from zeros"),
    ("magika", "bytes"): ("int:0:257", "byte values 0-255, 256 pads (magika's features)"),
}
ONNX_LICENCE = "Apache-2.0 (onnx test data; weights: seeded random)"


def _domain(graph, name: str) -> str:
    """The rule's domain for input ``name`` of ``graph`` (see the module)."""
    value = graph.value(name)
    if np.issubdtype(value.dtype, np.floating):
        return "normal"
    bounds = [
        graph.value(c.inputs[0]).shape[c.attrs.get("axis", 0)]
        for c in value.consumers
        if c.op_type == "Gather" and c.inputs[1] == name and graph.value(c.inputs[0]).shape
    ]
    return f"int:0:{min(bounds)}" if bounds else "int:0:2"


def _inputs(graph, model: str, frozen: dict[str, float]) -> list[str]:
    lines = []
    for name in graph.inputs:
        value = graph.value(name)
        domain, note = HELDOUT_DOMAINS.get((model, name), (_domain(graph, name), ""))
        lines += [
            "",
            "[[model.input]]",
            f'name = "{name}"',
            f"shape = {list(int(d) for d in value.shape)}",
            f'dtype = "{np.dtype(value.dtype).name}"',
            f'domain = "{domain}"',
            "freeze = false",
            f'note = "{note}"',
        ]
    for name, number in frozen.items():
        lines += ["", "[[model.input]]", f'name = "{name}"', "shape = []", 'dtype = "int64"']
        lines += [f'domain = "value:{number}"', "freeze = true", 'note = "the sample rate"']
    return lines


def _entry(fields: dict[str, object]) -> list[str]:
    lines = ["", "[[model]]"]
    for key, value in fields.items():
        lines.append(f"{key} = {value}" if isinstance(value, int) else f'{key} = "{value}"')
    return lines


def onnx_manifest() -> list[str]:
    """The lines of onnx.toml, writing each model's file into the cache."""
    lines = ["# onnx's light networks with seeded random weights. local_manifests.py writes it."]
    write_onnx_models()
    for name in zoo_names():
        path = CACHE / f"onnx_{name}.onnx"
        graph = load_graph(str(path))
        lines += _entry(
            {
                "name": f"onnx_{name}",
                "source": "onnx",
                "family": "vision-classification",
                "description": f"onnx backend test light model {name}, {len(graph)} nodes",
                "licence": ONNX_LICENCE,
                "sha256": sha256_of(path),
                "size": path.stat().st_size,
                "recipe": f"autopart.zoo:load_zoo_model('{name}', seed=0)",
                "version": onnx.__version__,
            }
        )
        lines += _inputs(graph, name, {})
    return lines


def heldout_manifest() -> list[str]:
    """The lines of heldout.toml (the held-out suite's cached files must be there)."""
    lines = ["# The frozen held-out suite (experiments/heldout). local_manifests.py writes it."]
    for model in load_suite().models:
        path = model.path(HELDOUT_CACHE)
        graph = load_graph(str(path), input_shapes=model.input_shapes, freeze=model.freeze)
        fields: dict[str, object] = {
            "name": f"heldout_{model.name}",
            "source": "heldout",
            "family": model.domain,
            "description": model.description.replace('"', "'"),
            "licence": "see experiments/heldout",
            "sha256": model.sha256,
            "size": model.size,
            "recipe": f"experiments/heldout:{model.name}",
        }
        if model.source == "wheel":
            fields |= {"package": model.package, "version": model.version, "member": model.member}
        lines += _entry(fields)
        lines += _inputs(graph, model.name, dict(model.freeze))
    return lines


def write_onnx_models() -> None:
    """Write each onnx model's file into the cache, leaving any already there."""
    for name in zoo_names():
        path = CACHE / f"onnx_{name}.onnx"
        if not path.exists():
            onnx.save(load_zoo_model(name, seed=0), path)


def main() -> None:
    CACHE.mkdir(exist_ok=True)
    if "--keep-manifest" in sys.argv[1:]:
        write_onnx_models()
        return
    (HERE / "onnx.toml").write_text("\n".join(onnx_manifest()) + "\n")
    (HERE / "heldout.toml").write_text("\n".join(heldout_manifest()) + "\n")


if __name__ == "__main__":
    main()
