"""Export the torchvision corpus models to ``experiments/corpus/cache/tv_<name>__<exporter>.onnx``.

Dev-only: run with a Python that has torch 2.14.1, torchvision 0.29.1, onnxscript 0.7.2,
onnx and onnxruntime (``/work/venv-export`` on the build machine).

    python experiments/corpus/export_torchvision.py                 # every recipe, both exporters
    python experiments/corpus/export_torchvision.py resnet18 s3d    # some of them
    python experiments/corpus/export_torchvision.py --force resnet18

Each recipe of ``torchvision_recipes.RECIPES`` is exported twice, one export at a time, each
in a child process (a hung or crashing exporter costs one entry, not the run):

- ``dynamo``: ``torch.onnx.export(module, args)`` with every option at its default, saved with
  the weights inside the file (``program.save(path, external_data=False)``);
- ``legacy``: ``torch.onnx.export(module, args, path, dynamo=False)`` at its default opset.

The per-node metadata is dropped so that a re-export is byte-identical. Each file is checked
with ``onnx.checker`` and against PyTorch with onnxruntime. The outcome of every export is
kept in ``cache/torchvision_results.json``; a file already present with its recorded sha256
is not exported again (a failed export is retried). ``torchvision.toml`` (one ``[[model]]`` per
export that loads and runs) and the "torchvision" section of ``EXPORTS.md`` are rewritten
from those results.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from corpus import sha256_of

HERE = Path(__file__).resolve().parent
CACHE = HERE / "cache"
RESULTS = CACHE / "torchvision_results.json"
MANIFEST = HERE / "torchvision.toml"
EXPORTS_MD = HERE / "EXPORTS.md"
EXPORTERS = ("dynamo", "legacy")
TOLERANCE = 1e-3  # max |onnxruntime - torch| / max(|torch|, 1)
MAX_BYTES = 250_000_000
MAX_PARAMS = 40_000_000
TIMEOUT = 1200  # seconds per export
KEEP_MANIFEST = "export and check only: leave the frozen manifest and notes as they are"
DATA_DEPENDENT = ("NonMaxSuppression", "NonZero", "Loop", "Scan", "If", "Unique", "Compress")
NOTABLE = (
    *DATA_DEPENDENT,
    "RoiAlign",
    "TopK",
    "Resize",
    "GridSample",
    "Einsum",
    "LayerNormalization",
    "Attention",
    "ScatterND",
    "ScatterElements",
    "GatherElements",
    "CumSum",
    "Conv3D",
)
TOOLCHAIN = ("torch", "torchvision", "onnxscript", "onnx", "onnxruntime")

Record = dict[str, Any]


def file_name(name: str, exporter: str) -> str:
    """The corpus name of ``name`` exported by ``exporter``."""
    return f"tv_{name}__{exporter}"


# --- the child: one export ------------------------------------------------------------------


def _export(module: Any, args: tuple[Any, ...], path: Path, exporter: str) -> None:
    import onnx
    import torch

    if exporter == "dynamo":
        program = torch.onnx.export(module, args)  # every option at its default
        if program is None:
            raise RuntimeError("torch.onnx.export returned no program")
        program.save(str(path), external_data=False)
    else:
        torch.onnx.export(module, args, str(path), dynamo=False)
    proto = onnx.load(str(path))
    for graph in _graphs(proto.graph):
        for node in graph.node:
            del node.metadata_props[:]
    onnx.save(proto, str(path))


def _graphs(graph: Any) -> list[Any]:
    """``graph`` and every subgraph nested in its nodes' attributes."""
    found = [graph]
    for node in graph.node:
        for attribute in node.attribute:
            for sub in [attribute.g, *attribute.graphs] if attribute.type in (5, 10) else []:
                found.extend(_graphs(sub))
    return found


def _dynamic(proto: Any) -> str:
    """The data-dependent constructs of a graph: NMS, NonZero, control flow, computed TopK."""
    found: set[str] = set()
    for graph in _graphs(proto.graph):
        constants = {i.name for i in graph.initializer}
        constants |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
        for node in graph.node:
            if node.op_type in DATA_DEPENDENT:
                found.add(node.op_type)
            if node.op_type == "TopK" and len(node.input) > 1 and node.input[1] not in constants:
                found.add("TopK (computed k)")
    return ", ".join(sorted(found))


def _compare(got: list[Any], expected: list[Any]) -> tuple[float, str]:
    """The largest relative error over float outputs, and a note on the mismatches."""
    import numpy as np

    notes = []
    if len(got) != len(expected):
        notes.append(f"{len(got)} outputs, torch has {len(expected)}")
    error = 0.0
    for index, (value, ref) in enumerate(zip(got, expected, strict=False)):
        if value.shape != ref.shape:
            notes.append(f"output {index}: shape {list(value.shape)} vs torch {list(ref.shape)}")
            continue
        if ref.size == 0:
            continue
        if np.issubdtype(ref.dtype, np.floating):
            scale = max(float(np.abs(ref).max()), 1.0)
            diff = float(np.abs(value.astype(np.float64) - ref).max()) / scale
            error = max(error, diff if math.isfinite(diff) else math.inf)
        elif (value != ref).any():
            notes.append(f"output {index}: {int((value != ref).sum())} of {ref.size} values differ")
    if error > TOLERANCE:
        notes.append(f"max error {error:.2e} > {TOLERANCE:g}")
    return error, "; ".join(notes)


def _sort_detections(arrays: list[Any], keys: list[str]) -> list[Any]:
    """One image's detections (boxes, scores, labels, ...) sorted by score, label, box."""
    import numpy as np

    fields = dict(zip(keys, arrays, strict=False))
    boxes, scores = fields["boxes"].round(2), fields["scores"].astype(np.float64).round(5)
    order = np.lexsort((*boxes.T[::-1], fields["labels"], -scores))
    return [a[order] if a.ndim and a.shape[0] == len(scores) else a for a in arrays]


def _check(got: list[Any], output: Any) -> tuple[float, str]:
    """Compare onnxruntime's outputs with torch's; detections may differ in order among ties."""
    import numpy as np
    from torch.utils._pytree import tree_leaves

    expected = [t.detach().numpy() for t in tree_leaves(output)]
    error, note = _compare(got, expected)
    if note and isinstance(output, list) and output and isinstance(output[0], dict):
        keys = list(output[0])
        sorted_error, sorted_note = _compare(
            _sort_detections(got, keys), _sort_detections(expected, keys)
        )
        if not sorted_note:
            return sorted_error, f"tied detections in another order (same once sorted: {note})"
        ours, theirs = (np.sort(a[keys.index("scores")]) for a in (got, expected))
        if ours.shape == theirs.shape and np.allclose(ours, theirs, rtol=0, atol=TOLERANCE):
            return error, f"other detections kept among tied scores (sorted scores match: {note})"
    return error, note


def _summary(proto: Any) -> Record:
    """Opset, node count, op histogram and graph inputs of a model."""
    import onnx

    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    ops = Counter(n.op_type for g in _graphs(proto.graph) for n in g.node)
    top = [op for op, _ in ops.most_common(6)]
    notable = [op for op in NOTABLE if op in ops and op not in top]
    initializers = {i.name for i in proto.graph.initializer}
    inputs = []
    for value in proto.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in tensor.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
        inputs.append({"name": value.name, "shape": shape, "dtype": dtype})
    return {
        "opset": opset,
        "nodes": sum(ops.values()),
        "ops": ", ".join(f"{op} {ops[op]}" for op in top + notable),
        "dynamic": _dynamic(proto),
        "inputs": inputs,
    }


def export_one(name: str, exporter: str, cache: Path) -> Record:
    """Export recipe ``name`` with ``exporter``, check it, and describe the outcome."""
    import onnx
    import onnxruntime as ort
    import torch
    import torchvision_recipes
    from torch.utils._pytree import tree_leaves

    module, args = torchvision_recipes.RECIPES[name]()
    path = cache / f"{file_name(name, exporter)}.onnx"
    record: Record = {"name": name, "exporter": exporter, "status": "failed"}
    try:
        _export(module, args, path, exporter)
    except Exception as error:  # the exporter's failure is the result
        path.unlink(missing_ok=True)
        record["reason"] = f"export: {_first_line(error)}"
        return record
    record.update(size=path.stat().st_size, sha256=sha256_of(path))
    if record["size"] > MAX_BYTES:
        path.unlink()
        record["reason"] = f"dropped: {record['size'] / 1e6:.0f} MB > 250 MB"
        return record
    proto = onnx.load(str(path))
    record.update(_summary(proto))
    try:
        onnx.checker.check_model(proto, full_check=True)
        record["checker"] = "ok"
    except Exception as error:  # noted, the file is kept
        record["checker"] = _first_line(error)
    del proto
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        leaves = [t.numpy() for t in tree_leaves(args)]
        feeds = {i.name: v for i, v in zip(session.get_inputs(), leaves, strict=False)}
        got = session.run(None, feeds)
    except Exception as error:  # cannot load or run: no manifest entry
        record["reason"] = f"onnxruntime: {_first_line(error)}"
        return record
    with torch.no_grad():
        output = module(*args)
    record["max_error"], record["note"] = _check(got, output)
    record["status"] = "ok"
    return record


def _first_line(error: BaseException) -> str:
    """The innermost cause's first line, and where it was raised when torch.export says."""
    while error.__cause__ is not None:
        error = error.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    where = [line for line in lines[1:] if line.startswith("Caused by:")][:1]
    first = (lines[0] if lines else "").split(" (unhinted:")[0]
    first = re.sub(r"(?:\d+\*Min\(\d+, u\d+\) \+ )+", "... + ", first)  # long symbolic sums
    first = first if len(first) <= 240 else first[:237] + "..."
    return " ".join([f"{type(error).__name__}: {first}", *where])[:400]


# --- the driver -----------------------------------------------------------------------------


def load_results() -> dict[str, Record]:
    """The recorded outcome of every export, by corpus name."""
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {}


def run_child(name: str, exporter: str, cache: Path, timeout: int) -> Record:
    """Run one export in a child process and return its record."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "record.json"
        command = [sys.executable, __file__, "--child", name, exporter, str(out)]
        command += ["--cache", str(cache)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            (cache / f"{file_name(name, exporter)}.onnx").unlink(missing_ok=True)
            return {"name": name, "exporter": exporter, "status": "failed",
                    "reason": f"export: timed out after {timeout} s"}  # fmt: skip
        if out.exists():
            return json.loads(out.read_text())
        tail = [line for line in done.stderr.splitlines() if line.strip()][-1:] or ["no output"]
        reason = f"child exited {done.returncode}: {tail[0][:200]}"
        return {"name": name, "exporter": exporter, "status": "failed", "reason": reason}


def cached(record: Record | None, cache: Path) -> bool:
    """Whether an ok export is on disk with its recorded sha256."""
    if record is None or record.get("status") != "ok":
        return False
    path = cache / f"{file_name(record['name'], record['exporter'])}.onnx"
    return path.exists() and sha256_of(path) == record["sha256"]


def toolchain() -> dict[str, str]:
    """The installed versions of the export toolchain."""
    return {p: importlib.metadata.version(p).split("+")[0] for p in TOOLCHAIN}


def rule() -> list[tuple[str, str, str, int, bool]]:
    """The rule of ``torchvision_recipes``: (kind, family, smallest builder, params, kept)."""
    from torchvision import models

    kinds = {
        "classification": models,
        "detection": models.detection,
        "segmentation": models.segmentation,
        "video": models.video,
        "optical_flow": models.optical_flow,
    }
    smallest: dict[tuple[str, str], tuple[int, str]] = {}
    for kind, module in kinds.items():
        for name in sorted(models.list_models(module)):
            family = models.get_model_builder(name).__module__.removeprefix("torchvision.models.")
            for prefix in ("efficientnet_v2", "swin_v2"):
                family = prefix if name.startswith(prefix) else family
            params = models.get_model_weights(name).DEFAULT.meta["num_params"]
            key = (kind, family)
            smallest[key] = min(smallest.get(key, (params, name)), (params, name))
    return [
        (kind, family, name, params, kind == "detection" or params <= MAX_PARAMS)
        for (kind, family), (params, name) in sorted(smallest.items())
    ]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def _description(record: Record) -> str:
    import torchvision_recipes

    family = torchvision_recipes.FAMILY[record["name"]]
    text = (
        f"torchvision {record['name']} ({family}, random weights), {record['exporter']} exporter, "
        f"opset {record['opset']}, {record['nodes']} nodes: {record['ops']}"
    )
    return text + (f"; vs torch: {record['note']}" if record.get("note") else "")


def write_manifest(results: dict[str, Record], versions: dict[str, str]) -> int:
    """Rewrite ``torchvision.toml`` from the ok records; return the number of models."""
    import torchvision_recipes

    lines = ["# The torchvision corpus models: written by export_torchvision.py, do not edit.", ""]
    lines += ["[toolchain]", *(f"{k} = {_toml_value(v)}" for k, v in versions.items()), ""]
    count = 0
    for key in sorted(results):
        record = results[key]
        if record["status"] != "ok":
            continue
        family = torchvision_recipes.FAMILY[record["name"]]
        domain, note = torchvision_recipes.DOMAIN[family]
        model = {
            "name": key,
            "source": "torch",
            "family": family,
            "description": _description(record),
            "licence": "BSD-3-Clause (torchvision)",
            "sha256": record["sha256"],
            "size": record["size"],
            "dynamic": record["dynamic"],
            "recipe": f"torchvision_recipes:{record['name']}",
            "exporter": record["exporter"],
        }
        lines += ["[[model]]", *(f"{k} = {_toml_value(v)}" for k, v in model.items()), ""]
        for value in record["inputs"]:
            lines += ["[[model.input]]", *(f"{k} = {_toml_value(v)}" for k, v in value.items())]
            lines += [f'domain = "{domain}"', "freeze = false", f"note = {_toml_value(note)}", ""]
        count += 1
    MANIFEST.write_text("\n".join(lines))
    return count


def _cell(record: Record | None) -> str:
    if record is None:
        return "not run"
    if record["status"] == "ok":
        return "ok" if record.get("checker", "ok") == "ok" else f"ok (checker: {record['checker']})"
    return "failed: " + record["reason"].replace("|", "\\|")


def _row(name: str, results: dict[str, Record]) -> str:
    dynamo, legacy = (results.get(file_name(name, e)) for e in EXPORTERS)
    cells = [f"`{name}`", _cell(dynamo), _cell(legacy)]
    for field, show in (
        ("nodes", str),
        ("size", lambda v: f"{v / 1e6:.1f} MB"),
        ("max_error", lambda v: f"{v:.1e}"),
    ):
        values = [show(r[field]) if r and r["status"] == "ok" else "-" for r in (dynamo, legacy)]
        cells.append(" / ".join(values))
    pairs = zip(EXPORTERS, (dynamo, legacy), strict=True)
    notes = [f"{e}: {r['note']}" for e, r in pairs if r and r.get("note")]
    pairs = zip(EXPORTERS, (dynamo, legacy), strict=True)
    notes += [f"{e} dynamic: {r['dynamic']}" for e, r in pairs if r and r.get("dynamic")]
    cells.append("; ".join(notes).replace("|", "\\|"))
    return "| " + " | ".join(cells) + " |"


def exports_section(results: dict[str, Record], versions: dict[str, str]) -> str:
    """The "torchvision" section of EXPORTS.md."""
    import torchvision_recipes

    lines = ["## torchvision", "", "Written by `export_torchvision.py`; toolchain "]
    lines[-1] += ", ".join(f"{k} {v}" for k, v in versions.items()) + "."
    lines += ["", "### The rule as applied", ""]
    lines += ["| kind | family (module) | smallest builder | parameters | kept |"]
    lines += ["|---|---|---|---|---|"]
    for kind, family, name, params, kept in rule():
        verdict = "yes" if kept else "no (> 40M)"
        lines.append(f"| {kind} | {family} | `{name}` | {params / 1e6:.2f}M | {verdict} |")
    ok = Counter(r["exporter"] for r in results.values() if r["status"] == "ok")
    lines += ["", "### Exports", "", f"{len(torchvision_recipes.RECIPES)} architectures: "]
    lines[-1] += f"{ok['dynamo']} dynamo and {ok['legacy']} legacy exports load and run. "
    lines[-1] += "Columns with two values read dynamo / legacy; max error is "
    lines[-1] += "max |ort - torch| / max(|torch|, 1) over float outputs.\n"
    lines.append("| builder | dynamo | legacy | nodes | size | max error vs torch | notes |")
    lines.append("|---|---|---|---|---|---|---|")
    lines += [_row(name, results) for name in torchvision_recipes.RECIPES]
    return "\n".join(lines) + "\n"


def write_exports_md(section: str) -> None:
    """Replace the "torchvision" section of EXPORTS.md (create the file if absent)."""
    if not EXPORTS_MD.exists():
        header = "# Corpus exports\n\n"
        EXPORTS_MD.write_text(header + section + "\n## transformers\n\n(not yet written)\n")
        return
    text = EXPORTS_MD.read_text()
    pattern = re.compile(r"^## torchvision\n.*?(?=^## |\Z)", re.M | re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    EXPORTS_MD.write_text(text)


def main() -> None:
    """Export the selected recipes with both exporters, then rewrite the manifest and notes.

    With ``--keep-manifest`` (as ``fetch.py`` runs it) the frozen manifest and notes are
    left as they are.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="recipe names (default: all)")
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--force", action="store_true", help="export even if the file is ok")
    parser.add_argument("--exporter", choices=EXPORTERS, action="append")
    parser.add_argument("--timeout", type=int, default=TIMEOUT)
    parser.add_argument("--child", nargs=3, metavar=("NAME", "EXPORTER", "OUT"))
    parser.add_argument("--keep-manifest", action="store_true", help=KEEP_MANIFEST)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    if args.child:
        name, exporter, out = args.child
        Path(out).write_text(json.dumps(export_one(name, exporter, args.cache)))
        return
    import torchvision_recipes

    unknown = sorted(set(args.models) - set(torchvision_recipes.RECIPES))
    if unknown:
        parser.error(f"unknown recipes: {', '.join(unknown)}")
    args.cache.mkdir(parents=True, exist_ok=True)
    results = load_results()
    for name in args.models or list(torchvision_recipes.RECIPES):
        for exporter in args.exporter or EXPORTERS:
            key = file_name(name, exporter)
            if not args.force and cached(results.get(key), args.cache):
                print(f"{key:<52} ok (cached)", flush=True)
                continue
            record = run_child(name, exporter, args.cache, args.timeout)
            results[key] = record
            RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True))
            status = _cell(record)
            if record["status"] == "ok":
                status += f", {record['nodes']} nodes, error {record['max_error']:.1e}"
            print(f"{key:<52} {status}", flush=True)
    if args.keep_manifest:
        return
    versions = toolchain()
    count = write_manifest(results, versions)
    write_exports_md(exports_section(results, versions))
    print(f"{count} models in {MANIFEST.name}")


if __name__ == "__main__":
    main()
