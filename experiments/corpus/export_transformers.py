"""Export the ``transformers`` recipes to ``cache/hf_<name>__{dynamo,legacy}.onnx``.

Dev-only: needs torch 2.14.1, onnxscript 0.7.2, transformers, onnx and onnxruntime (the
export venv). No hub access: every model comes from its config (``transformers_recipes``).

    python experiments/corpus/export_transformers.py            # every recipe
    python experiments/corpus/export_transformers.py bert gpt2  # some of them
    python experiments/corpus/export_transformers.py --force bert  # re-export, compare sha256

For each recipe, two exports: ``__dynamo`` is ``torch.onnx.export(module, args)`` with every
option at its default, saved with the weights inside; ``__legacy`` is
``torch.onnx.export(module, args, path, dynamo=False)`` at its default opset (opset 18 only
if the default fails, and recorded). The per-node metadata and doc strings (stack traces
naming this checkout's paths) are dropped so that a re-export is byte-identical. Each file
is checked with ``onnx.checker`` (full check) and onnxruntime against PyTorch. A file
already present with its recorded sha256 is skipped. The results go to
``cache/transformers_results.json``, then ``transformers.toml`` and the "transformers"
section of ``EXPORTS.md`` are written from them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CACHE = HERE / "cache"
RESULTS = CACHE / "transformers_results.json"
TOLERANCE = 1e-3  # max |onnxruntime - torch| / max(|torch|, 1)
FALLBACK_OPSET = 18  # legacy exporter only, when its default opset fails
KEEP_MANIFEST = "export and check only: leave the frozen manifest and notes as they are"
DYNAMIC_OPS = {"NonZero", "NonMaxSuppression", "Loop", "If", "Unique", "Compress", "Scan"}
EXPORTERS = ("dynamo", "legacy")
Record = dict[str, Any]


def sha256(path: Path) -> str:
    """The hex sha256 of a file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _strip(graph: Any) -> None:
    """Drop node metadata and doc strings, recursing into subgraphs."""
    for node in graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
        for attr in node.attribute:
            if attr.HasField("g"):
                _strip(attr.g)
            for sub in attr.graphs:
                _strip(sub)


def _export(module: Any, args: tuple, path: Path, exporter: str) -> str:
    """Export with ``exporter`` into ``path`` (stripped); return a note on the opset used."""
    import onnx
    import torch

    note = ""
    if exporter == "dynamo":
        program = torch.onnx.export(module, args)  # every option at its default
        if program is None:
            raise RuntimeError("torch.onnx.export returned no program")
        program.save(str(path), external_data=False)
    else:
        try:
            torch.onnx.export(module, args, str(path), dynamo=False)
        except Exception as error:
            note = f"default opset failed ({_reason(error)}); opset {FALLBACK_OPSET}"
            torch.onnx.export(module, args, str(path), dynamo=False, opset_version=FALLBACK_OPSET)
    proto = onnx.load(str(path))
    _strip(proto.graph)
    onnx.save(proto, str(path))
    return note


def _match(names: list[str], specs: list, args: tuple) -> dict[str, tuple]:
    """Graph input name -> (spec, tensor): by name, else by position (legacy's debug names)."""
    by_name = {s.name: (s, t) for s, t in zip(specs, args, strict=True)}
    if all(n in by_name for n in names):
        return {n: by_name[n] for n in names}
    if len(names) != len(specs):
        raise RuntimeError(f"graph inputs {names} do not line up with the recipe's inputs")
    return dict(zip(names, zip(specs, args, strict=True), strict=True))


def _spec_record(name: str, spec: Any) -> Record:
    """The manifest fields of graph input ``name`` described by recipe input ``spec``."""
    record = asdict(spec) | {"name": name, "shape": list(spec.shape)}
    if name != spec.name:
        record["note"] = f"{spec.name}: {spec.note}" if spec.note else spec.name
    return record


def _check(path: Path, module: Any, args: tuple, specs: list) -> Record:
    """Check ``path`` with onnx.checker and onnxruntime vs torch; return its facts."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    matched = _match(names, specs, args)
    feeds = {n: t.numpy() for n, (_, t) in matched.items()}
    with torch.no_grad():
        expected = module(*args)
    got = session.run(None, feeds)
    if len(got) != len(expected):
        raise RuntimeError(f"{len(got)} onnxruntime outputs for {len(expected)} torch outputs")
    error = strict_error = 0.0
    for out, ref in zip(got, expected, strict=True):
        diff = float(np.abs(out - ref.numpy()).max())
        peak = float(ref.abs().max())
        error = max(error, diff / max(peak, 1.0))
        strict_error = max(strict_error, diff / peak if peak else diff)
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    ops = Counter(node.op_type for node in proto.graph.node)
    return {
        "inputs": [_spec_record(name, spec) for name, (spec, _) in matched.items()],
        "dropped": [s.name for s in specs if s not in {v[0] for v in matched.values()}],
        "opset": opset,
        "nodes": len(proto.graph.node),
        "ops": ops.most_common(),
        "max_error": error,
        "strict_error": strict_error,  # relative to max |torch| alone (outputs << 1)
        "dynamic": ", ".join(sorted(DYNAMIC_OPS & set(ops))),
    }


def _reason(error: BaseException) -> str:
    """A one-line reason for a failure."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:240]


def export_one(name: str, family: str, builder: Any, exporter: str) -> Record:
    """Build, export and check one recipe with one exporter; a failure is recorded."""
    import torch

    file = f"hf_{name}__{exporter}"
    path = CACHE / f"{file}.onnx"
    record: Record = {
        "name": file,
        "model": name,
        "family": family,
        "exporter": exporter,
        "recipe": f"{builder.__module__}:{builder.__name__}",
        "summary": (builder.__doc__ or "").strip().splitlines()[0],
    }
    torch.manual_seed(0)
    module, args, specs = builder()
    module.eval()
    try:
        record["opset_note"] = _export(module, args, path, exporter)
        record.update(_check(path, module, args, specs))
    except Exception as error:  # an exporter failure is recorded, the rest go on
        path.unlink(missing_ok=True)
        return record | {"status": "failed", "reason": _reason(error)}
    record.update(status="ok", sha256=sha256(path), size=path.stat().st_size)
    if record["max_error"] > TOLERANCE:
        record["mismatch"] = f"onnxruntime differs from torch by {record['max_error']:.2e}"
    return record


def _cached(record: Record | None) -> bool:
    """Whether ``record`` is a successful export whose file is present and unchanged."""
    if not record or record.get("status") != "ok":
        return False
    path = CACHE / f"{record['name']}.onnx"
    return path.exists() and sha256(path) == record["sha256"]


def run(names: list[str], force: bool) -> dict[str, Record]:
    """Export ``names`` (skipping cached files unless ``force``); return all results."""
    from transformers_recipes import RECIPES

    results: dict[str, Record] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for name in names:
        family, builder = RECIPES[name]
        for exporter in EXPORTERS:
            file = f"hf_{name}__{exporter}"
            old = results.get(file)
            if not force and _cached(old):
                print(f"{file:<28} ok (cached)", flush=True)
                continue
            new = export_one(name, family, builder, exporter)
            if new["status"] == "ok" and old and old.get("status") == "ok":
                same = "identical" if new["sha256"] == old["sha256"] else "DIFFERENT"
                new["reexport"] = f"re-export {same} to the recorded sha256"
            results[file] = new
            RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
            print(f"{file:<28} {_line(new)}", flush=True)
    return results


def _line(record: Record) -> str:
    """A one-line summary of an export result."""
    if record["status"] != "ok":
        return f"FAILED {record['reason']}"
    extra = "; ".join(record[k] for k in ("opset_note", "mismatch", "reexport") if record.get(k))
    return (
        f"ok {record['size'] / 1e6:.2f} MB, opset {record['opset']}, {record['nodes']} nodes, "
        f"max error {record['max_error']:.1e} (strict {record['strict_error']:.1e})"
        f"{'; ' + extra if extra else ''}"
    )


def _toml_str(value: object) -> str:
    """A TOML basic string (JSON escaping is valid TOML)."""
    return json.dumps(str(value))


def _toolchain() -> dict[str, str]:
    """The installed versions of the export toolchain."""
    import importlib.metadata

    packages = ("torch", "transformers", "onnxscript", "onnx", "onnxruntime")
    return {p: importlib.metadata.version(p) for p in packages}


def _description(record: Record) -> str:
    """The manifest's one-line description of an export."""
    top = ", ".join(f"{op} {n}" for op, n in record["ops"][:6])
    text = (
        f"{record['summary'].rstrip('.')}; {record['exporter']} exporter, opset "
        f"{record['opset']}, {record['nodes']} nodes ({top})"
    )
    for key in ("opset_note", "mismatch"):
        if record.get(key):
            text += f"; {record[key]}"
    if record.get("dropped"):
        text += f"; the exporter dropped the unused input(s) {', '.join(record['dropped'])}"
    return text


def write_manifest(records: list[Record]) -> None:
    """Write ``transformers.toml``: the toolchain, then one ``[[model]]`` per good export."""
    lines = ["# Generated by export_transformers.py; see transformers_recipes.py for the rule.", ""]
    lines += ["[toolchain]"] + [f"{k} = {_toml_str(v)}" for k, v in _toolchain().items()]
    for r in (r for r in records if r["status"] == "ok"):
        lines += ["", "[[model]]"]
        fields = {
            "name": r["name"],
            "source": "torch",
            "family": r["family"],
            "description": _description(r),
            "licence": "Apache-2.0 (transformers)",
            "sha256": r["sha256"],
        }
        lines += [f"{k} = {_toml_str(v)}" for k, v in fields.items()]
        lines.append(f"size = {r['size']}")
        lines += [f"recipe = {_toml_str(r['recipe'])}", f"exporter = {_toml_str(r['exporter'])}"]
        lines.append(f"dynamic = {_toml_str(r['dynamic'])}")
        for spec in r["inputs"]:
            lines += ["", "[[model.input]]", f"name = {_toml_str(spec['name'])}"]
            lines.append(f"shape = [{', '.join(str(d) for d in spec['shape'])}]")
            lines += [
                f"dtype = {_toml_str(spec['dtype'])}",
                f"domain = {_toml_str(spec['domain'])}",
            ]
            lines += ["freeze = false", f"note = {_toml_str(spec['note'])}"]
    (HERE / "transformers.toml").write_text("\n".join(lines) + "\n")


def _cell(record: Record | None) -> str:
    """The EXPORTS.md status cell of one export."""
    if record is None:
        return "not run"
    if record["status"] != "ok":
        return f"failed: {record['reason'].replace('|', '/')}"
    notes = [record[k] for k in ("opset_note", "mismatch") if record.get(k)]
    return "ok" + (f" ({'; '.join(notes)})" if notes else "")


def _pair(records: dict[str, Record], model: str, key: str, fmt: str) -> str:
    """``dynamo / legacy`` values of ``key`` for one model."""
    values = []
    for exporter in EXPORTERS:
        r = records.get(f"hf_{model}__{exporter}")
        values.append(format(r[key], fmt) if r and r["status"] == "ok" else "-")
    return " / ".join(values)


NOTES = [
    "Both exporters default to opset 20 here; the legacy opset-18 fallback was never needed.",
    "The dynamo exporter fails on the default SDPA attention of T5, BEiT and Swin (`Cannot "
    "view a tensor with shape ... and strides ...` while decomposing): they use eager.",
    "The legacy exporter lacks `aten::diff`, which transformers 5 calls to detect packed "
    "sequences when a causal model gets no attention mask: every decoder takes one.",
    "The legacy exporter names graph inputs after TorchScript values (`input.1`, "
    "`onnx::Reshape_0`); the manifest keeps those names and notes the recipe input.",
    "The legacy exporter duplicates tied embeddings (+1 MB on GPT-2, Gemma, BLOOM, OPT, "
    "Falcon, Mamba, T5, BART, Marian, Whisper); dynamo shares one initializer.",
    "Dynamo folds BEiT's relative-position index tables into int64 initializers (6.3 MB "
    "against 1.5 MB for legacy, which computes them).",
]


def write_exports(records: list[Record]) -> None:
    """Rewrite the "transformers" section of EXPORTS.md (creating the file if absent)."""
    path = HERE / "EXPORTS.md"
    text = path.read_text() if path.exists() else "# Exports\n\n## torchvision\n\n## transformers\n"
    by_name = {r["name"]: r for r in records}
    models = list(dict.fromkeys(r["model"] for r in records))
    rule = (sys.modules["transformers_recipes"].__doc__ or "").strip().split("\n\n")[1]
    body = ["## transformers", "", " ".join(rule.split()), ""]
    body += ["Cells read dynamo / legacy; sizes in MB; max error is max |ort - torch| / "
             "max(|torch|, 1) (the check, tolerance 1e-3); strict error divides by max |torch| "
             "alone (random-weight outputs are often << 1).", ""]  # fmt: skip
    body += ["| model | family | dynamo | legacy | nodes | size | max error | strict error |"]
    body += ["|---|---|---|---|---|---|---|---|"]
    for model in models:
        d, g = (by_name.get(f"hf_{model}__{e}") for e in EXPORTERS)
        family = (d or g or {}).get("family", "")
        sizes = " / ".join(f"{r['size'] / 1e6:.2f}" if r and r["status"] == "ok" else "-"
                           for r in (d, g))  # fmt: skip
        body.append(
            f"| {model} | {family} | {_cell(d)} | {_cell(g)} | "
            f"{_pair(by_name, model, 'nodes', 'd')} | {sizes} | "
            f"{_pair(by_name, model, 'max_error', '.1e')} | "
            f"{_pair(by_name, model, 'strict_error', '.1e')} |"
        )
    failed = [f"- {r['name']}: {r['reason']}" for r in records if r["status"] != "ok"]
    body += ["", "Failures:" if failed else "Failures: none.", *failed]
    body += ["", "Notes:", "", *(f"- {note}" for note in NOTES)]
    head, _, rest = text.partition("## transformers")
    head = head.rstrip("\n") + "\n\n"
    after = rest[rest.find("\n## ") + 1 :] if "\n## " in rest else ""
    path.write_text(head + "\n".join(body) + "\n" + ("\n" + after if after else ""))


def main() -> None:
    """Export the selected recipes and rewrite the manifest and EXPORTS.md section.

    With ``--keep-manifest`` (as ``fetch.py`` runs it) the files are exported and checked,
    and the frozen manifest and notes are left as they are.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    sys.path.insert(0, str(HERE))
    import torch
    from transformers_recipes import RECIPES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="recipe names (default: all)")
    parser.add_argument("--force", action="store_true", help="export even if cached")
    parser.add_argument("--keep-manifest", action="store_true", help=KEEP_MANIFEST)
    args = parser.parse_args()
    unknown = [m for m in args.models if m not in RECIPES]
    if unknown:
        parser.error(f"unknown recipes: {', '.join(unknown)}")
    torch.set_num_threads(2)
    CACHE.mkdir(parents=True, exist_ok=True)
    results = run(args.models or list(RECIPES), args.force)
    ordered = [
        results[f"hf_{n}__{e}"] for n in RECIPES for e in EXPORTERS if f"hf_{n}__{e}" in results
    ]
    if not args.keep_manifest:
        write_manifest(ordered)
        write_exports(ordered)


if __name__ == "__main__":
    main()
