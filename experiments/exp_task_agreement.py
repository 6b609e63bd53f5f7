"""Experiment: under the default tolerance, does a task still give the answers f32 gives?

Issue 30, item 9: error norms on random inputs say little about what a user sees. For
pretrained models of the held-out suite (``experiments/heldout/cache``), fed real inputs
made here (``_task_inputs.py``), each model is tuned at the default budget
(:func:`autopart.api.tune`, every precision this machine offers, tolerance OpenVINO as
installed's own error plus 10%), and the task's answer of the tuned plan (run by the plan
executor) is compared sample by sample with the answer of onnxruntime on the original
model (f32). So are the answers of autopart's whole model on ``cpu@openvino:bf16`` (what
bf16 does to the task, whether or not the plan uses it) and of OpenVINO as installed on
the original model (bf16 here; where it can compile the model as it ships):

- ``silero_vad``: speech synthesised with espeak-ng (five languages, varied speed, pitch
  and loudness; a quarter of the streams silent), with silence and white or brown noise,
  streamed in 512-sample chunks at 16 kHz after 64 samples of context as the package's
  wrapper feeds them, each runner carrying its own LSTM state; the answer is speech when
  the probability exceeds 0.5, per chunk;
- ``ppocr_cls``: text lines rendered in the DejaVu fonts, half turned 180 degrees; the
  answer is the argmax class (``0`` or ``180``);
- ``ppocrv4_rec``: rendered text lines; the answer is the greedy CTC-decoded string;
- ``magika``: real files of this machine; the answer is the argmax content type.

Passing means at least 99% agreement. Margins say how close f32's answer was to flipping
(probability minus 0.5; top-1 minus top-2; for CTC, the smallest top-1 minus top-2 step).

Writes experiments/results/task_agreement.csv (per model) and
task_agreement_samples.csv (per sample).

    python experiments/exp_task_agreement.py [--models silero_vad ppocr_cls]
        [--samples 300] [--vad-streams 24] [--rounds 3] [--search-dir search/task_agreement]
        [--tolerance REL --out task_agreement_tight]

With ``--tolerance``, each model is tuned to that budget instead of the default one (the
other columns, OpenVINO as installed and bf16 everywhere, do not change), and the CSVs are
named after ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
import pandas as pd
from _common import console, one_line, show, write_csv
from _task_inputs import (
    ctc_decode,
    file_ends,
    have_espeak,
    machine_files,
    magika_features,
    ocr_input,
    rec_characters,
    render_lines,
    speech_streams,
    vad_chunks,
)
from heldout.suite import CACHE

from autopart import api
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.plan.build import build_plan_for
from autopart.plan.schema import Plan
from autopart.runtime.plan_executor import PlanExecutor
from autopart.targets.onnxruntime.peer import onnxruntime_alone
from autopart.targets.openvino.peer import openvino_alone
from autopart.tuning.peers import PeerInputs
from autopart.tuning.plan_rows import plan_precisions
from autopart.tuning.workflow import TuneReport

Feeds = dict[str, np.ndarray]
Runner = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]
MODELS = ("silero_vad", "ppocr_cls", "ppocrv4_rec", "magika")
FILE_ROOTS = ("/usr/share", "/usr/lib", "/usr/include", "/usr/bin", "/etc")
AGREEMENT = 0.99  # the bar
COMPARED = ("plan", "bf16", "openvino")  # the runners compared with f32
BF16 = VirtualDevice.parse("cpu@openvino:bf16")
FALLBACK = VirtualDevice.parse("cpu@numpy")


@dataclass
class Sample:
    """One input of a task: its feeds, the true answer where it is known, and its stream.

    ``source`` says what it was made from (a file's path, a line's text).
    """

    feeds: Feeds
    truth: str = ""
    stream: int = 0
    source: str = ""


@dataclass
class Task:
    """How one model is fed and read: its shapes, samples, answer and carried state.

    ``answer`` maps the main output to (answer, margin); ``carry`` maps an output to the
    input it feeds at the next step of a stream (``initial`` at a stream's start).
    """

    model: str
    shapes: dict[str, list[int]]
    samples: Callable[[argparse.Namespace], list[Sample]]
    answer: Callable[[np.ndarray], tuple[str, float]]
    output: str
    freeze: dict[str, int] = field(default_factory=dict)
    carry: dict[str, str] = field(default_factory=dict)
    initial: Feeds = field(default_factory=dict)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    parser.add_argument("--samples", type=int, default=300, help="per model, but silero_vad")
    parser.add_argument("--vad-streams", type=int, default=24, help="silero_vad's streams")
    parser.add_argument("--rounds", type=int, default=3, help="tune's timed rounds")
    parser.add_argument("--search-dir", default="search/task_agreement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=None, help="default: the default budget")
    parser.add_argument("--out", default="task_agreement", help="name of the CSVs written")
    return parser.parse_args()


def vad_samples(args: argparse.Namespace) -> list[Sample]:
    """Silero's chunks of every synthesised stream, in order."""
    if not have_espeak():
        raise SystemExit("silero_vad needs espeak-ng (apt-get install -y espeak-ng)")
    samples = []
    for index, stream in enumerate(speech_streams(args.vad_streams, args.seed)):
        samples.extend(Sample({"input": chunk}, stream=index) for chunk in vad_chunks(stream))
    return samples


def speech(probability: np.ndarray) -> tuple[str, float]:
    """Speech or not at Silero's usual 0.5 threshold; the margin from it."""
    value = float(np.asarray(probability).reshape(-1)[0])
    return ("speech" if value > 0.5 else "silence"), value - 0.5


def top_two(scores: np.ndarray) -> tuple[int, float]:
    """The argmax of the last axis (flattened first) and its lead over the second."""
    flat = np.asarray(scores, dtype=np.float64).reshape(-1)
    order = np.argsort(flat)
    return int(order[-1]), float(flat[order[-1]] - flat[order[-2]])


def direction_samples(args: argparse.Namespace) -> list[Sample]:
    """Rendered lines, half turned; RapidOCR's classifier input (1, 3, 48, 192)."""
    lines = render_lines(args.samples, args.seed, 24, turn=True)
    return [
        Sample({"x": ocr_input(line.image, 48, 192)}, "180" if line.turned else "0", 0, line.text)
        for line in lines
    ]


def recognition_samples(args: argparse.Namespace) -> list[Sample]:
    """Rendered upright lines; RapidOCR's recogniser input (1, 3, 48, 320)."""
    lines = render_lines(args.samples, args.seed + 1, 14, turn=False)
    return [
        Sample({"x": ocr_input(line.image, 48, 320)}, line.text, source=line.text) for line in lines
    ]


def file_samples(args: argparse.Namespace) -> list[Sample]:
    """Magika's features of real files here, spread over as many suffixes as there are."""
    paths = machine_files(args.samples, args.seed, FILE_ROOTS)
    return [Sample({"bytes": magika_features(file_ends(path))}, source=str(path)) for path in paths]


def magika_labels() -> list[str]:
    """Magika's content types, from the wheel the suite fetched (indices if it is absent)."""
    wheels = sorted((CACHE / "wheels").glob("magika-*.whl"))
    if not wheels:
        return [str(index) for index in range(214)]
    with zipfile.ZipFile(wheels[0]) as archive:
        config = json.loads(archive.read("magika/models/standard_v3_3/config.min.json"))
    return list(config["target_labels_space"])


def tasks() -> dict[str, Task]:
    """The four tasks, by model name."""
    rec = onnx.load(str(CACHE / "ppocrv4_rec.onnx"), load_external_data=False)
    metadata = {prop.key: prop.value for prop in rec.metadata_props}
    characters = rec_characters(metadata.get("character", ""))
    labels = magika_labels()

    def decoded(scores: np.ndarray) -> tuple[str, float]:
        leads = np.sort(scores.reshape(-1, scores.shape[-1]), axis=-1)
        return ctc_decode(scores, characters), float((leads[:, -1] - leads[:, -2]).min())

    def argmax(names: list[str]) -> Callable[[np.ndarray], tuple[str, float]]:
        def read(scores: np.ndarray) -> tuple[str, float]:
            index, lead = top_two(scores)
            return names[index], lead

        return read

    return {
        "silero_vad": Task(
            "silero_vad", {"input": [1, 576], "state": [2, 1, 128]}, vad_samples, speech,
            "output", {"sr": 16000}, {"stateN": "state"},
            {"state": np.zeros((2, 1, 128), np.float32)},
        ),
        "ppocr_cls": Task(
            "ppocr_cls", {"x": [1, 3, 48, 192]}, direction_samples, argmax(["0", "180"]),
            "save_infer_model/scale_0.tmp_1",
        ),
        "ppocrv4_rec": Task(
            "ppocrv4_rec", {"x": [1, 3, 48, 320]}, recognition_samples, decoded,
            "softmax_11.tmp_0",
        ),
        "magika": Task(
            "magika", {"bytes": [1, 2048]}, file_samples, argmax(labels), "target_label"
        ),
    }  # fmt: skip


def lockstep(
    task: Task, runners: Mapping[str, Runner], samples: list[Sample]
) -> Iterator[tuple[Sample, dict[str, np.ndarray]]]:
    """Each sample with every runner's main output; each runner carries its own state."""
    states: dict[str, Feeds] = {}
    stream = None
    for sample in samples:
        if sample.stream != stream:
            states = {name: dict(task.initial) for name in runners}
            stream = sample.stream
        mains = {}
        for name, runner in runners.items():
            outputs = runner({**sample.feeds, **states[name]})
            states[name] = {feed: np.array(outputs[out]) for out, feed in task.carry.items()}
            mains[name] = np.array(outputs[task.output])
        yield sample, mains


def relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    """max |got - expected| over max |expected|, as autopart's output check measures it."""
    expected = np.asarray(expected, dtype=np.float64)
    scale = float(np.abs(expected).max()) or 1.0
    return float(np.abs(np.asarray(got, dtype=np.float64) - expected).max()) / scale


def runners(
    path: str, graph: Graph, plan: Plan, stack: contextlib.ExitStack
) -> tuple[dict[str, Runner], list[str]]:
    """The runners compared, f32 first; and why any could not be made.

    ``f32`` is onnxruntime alone on the original model, ``plan`` the tuned plan, ``bf16``
    autopart's whole model on ``cpu@openvino:bf16`` (where this CPU offers it) and
    ``openvino`` OpenVINO as installed on the original model (where it can compile it).
    """
    inputs = PeerInputs.of(graph)
    made: dict[str, Runner] = {"f32": onnxruntime_alone(path, inputs=inputs)}
    tuned = stack.enter_context(PlanExecutor(plan, graph))
    made["plan"] = lambda feeds: tuned.run(feeds).outputs
    notes = []
    try:
        whole = build_plan_for(graph, {n.name: BF16 for n in graph.nodes}, FALLBACK, graph.name)
        bf16 = stack.enter_context(PlanExecutor(whole, graph))
        made["bf16"] = lambda feeds: bf16.run(feeds).outputs
    except Exception as error:  # a CPU without bf16, a model OpenVINO refuses: a result
        notes.append(f"bf16: {one_line(error)}")
    try:
        made["openvino"] = openvino_alone(path, inputs)
    except Exception as error:  # OpenVINO cannot compile every model as it ships: a result
        notes.append(f"openvino: {one_line(error)}")
    return made, notes


def run_task(task: Task, args: argparse.Namespace) -> tuple[dict[str, object], pd.DataFrame]:
    """Tune ``task``'s model (default budget or ``--tolerance``), compare its answers with f32's."""
    path = str(CACHE / f"{task.model}.onnx")
    freeze = task.freeze or None
    budget = "the default budget" if args.tolerance is None else f"tolerance {args.tolerance}"
    console.print(f"[bold]{task.model}[/bold]: tune at {budget}")
    tuned = api.tune(path, input_shapes=task.shapes, freeze=freeze, search_dir=args.search_dir,
                     rounds=args.rounds, tolerance=args.tolerance)  # fmt: skip
    graph = api.load(path, task.shapes, freeze)
    samples = task.samples(args)
    console.print(f"{task.model}: {tuned.chosen} ({plan_precisions(tuned.plan)}); "
                  f"{len(samples)} samples")  # fmt: skip
    rows = []
    with contextlib.ExitStack() as stack:
        made, notes = runners(path, graph, tuned.plan, stack)
        for sample, mains in lockstep(task, made, samples):
            answers = {name: task.answer(main) for name, main in mains.items()}
            row = {"model": task.model, "stream": sample.stream, "source": sample.source,
                   "truth": sample.truth, "f32_margin": answers["f32"][1]}  # fmt: skip
            row.update({name: answer for name, (answer, _) in answers.items()})
            for name in COMPARED:
                if name in mains:
                    row[f"{name}_error"] = relative_error(mains[name], mains["f32"])
            rows.append(row)
    return summary(task, tuned, pd.DataFrame(rows), notes), pd.DataFrame(rows)


def summary(
    task: Task, tuned: TuneReport, table: pd.DataFrame, notes: list[str]
) -> dict[str, object]:
    """One model's row: the plan, its precisions, each runner's agreement and errors."""
    plan = tuned.plan
    known = table[table["truth"] != ""]
    row: dict[str, object] = {
        "model": task.model,
        "samples": len(table),
        "streams": table["stream"].nunique(),
        "plan": tuned.chosen,
        "precisions": plan_precisions(plan),
        "targets": "+".join(sorted({p.target for p in plan.partitions})),
        "tolerance": np.nan if plan.measured is None else plan.measured.tolerance,
        "random_input_error": np.nan if plan.measured is None else plan.measured.max_error,
    }
    for name in COMPARED:
        agree = (table[name] == table["f32"]) if name in table else pd.Series(dtype=bool)
        row[f"{name}_agreement"] = float(agree.mean()) if len(agree) else np.nan
        row[f"{name}_disagreements"] = int((~agree).sum()) if len(agree) else np.nan
        row[f"{name}_error_max"] = table[f"{name}_error"].max() if name in table else np.nan
        row[f"{name}_error_median"] = table[f"{name}_error"].median() if name in table else np.nan
    for name in ("f32", "plan", "bf16"):
        right = (known[name] == known["truth"]) if name in known else pd.Series(dtype=bool)
        row[f"{name}_accuracy"] = float(right.mean()) if len(right) else np.nan
    row["passed"] = bool(row["plan_agreement"] >= AGREEMENT)
    row["notes"] = "; ".join(notes)
    row["error"] = ""
    return row


SHOWN = ("model", "samples", "precisions", "plan", "plan_agreement", "plan_error_max",
         "bf16_agreement", "bf16_error_max", "openvino_agreement", "f32_accuracy", "passed",
         "error")  # fmt: skip


def main() -> None:
    args = arguments()
    found = tasks()
    rows, samples = [], []
    for name in args.models:
        try:
            row, table = run_task(found[name], args)
        except Exception as error:  # any failure is a result here: record it and go on
            row, table = {"model": name, "error": one_line(error)}, pd.DataFrame()
        rows.append(row)
        samples.append(table)
        console.print(f"{name}: {row}")
        write_csv(pd.DataFrame(rows), f"{args.out}.csv")
        write_csv(pd.concat(samples, ignore_index=True), f"{args.out}_samples.csv")
    result = pd.DataFrame(rows)
    console.print(f"wrote {write_csv(result, f'{args.out}.csv')}")
    shown = result[[c for c in SHOWN if c in result]]
    show("the task's answers: tuned plan (default budget) against f32 onnxruntime", shown, 4)


if __name__ == "__main__":
    main()
