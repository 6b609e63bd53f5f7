"""Where an autopart command's resident memory goes: its peak per stage, and what made it.

Runs one autopart command in this process while a thread samples the resident set
(``VmRSS``) and the main thread's stack every 0.5 s, and writes every sample to LOG.txt
at the end. It attributes each sample to the stage its stack is in
(the first of :data:`STAGES` whose function appears in it) and writes, per stage, the
highest sample and the call that was running then.

    python experiments/probe_memory.py OUT.csv LOG.txt bench vgg19 --search-dir ...

Writes OUT.csv (``stage``, ``peak_gib``, ``at_s``, ``where``) and prints it.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from pathlib import Path

import pandas as pd

from autopart.host_memory import status_bytes  # not _common: its imports would count

# (stage, a function in the main thread's stack that places a sample in it), in order:
# the first that matches wins, so inner stages come before the outer ones.
STAGES = (
    ("peers built", "peers"),
    ("tune: race and verify", "_verify"),
    ("screen", "screen_targets"),
    ("profile: partitions whole", "profile_partitions"),
    ("profile: ops", "profile_graph"),
    ("int8 agreement probe", "_probe_graph"),
    ("load", "resolve_model"),
    ("bench: measure", "measure_plans"),
    ("bench: other", "_bench_model"),
)


def _sample(log: list[tuple[float, float, list[str]]], main_id: int, stop: threading.Event) -> None:
    """Append (seconds, GiB, the main thread's functions, innermost first) every 0.5 s."""
    start = time.perf_counter()
    while not stop.wait(0.5):
        frame = sys._current_frames().get(main_id)
        stack = (
            [f"{f.name}@{Path(f.filename).name}:{f.lineno}" for f in traceback.extract_stack(frame)]
            if frame
            else []
        )
        resident = (status_bytes("VmRSS") or 0) / 2**30
        log.append((time.perf_counter() - start, resident, stack[::-1]))


def stage_of(stack: list[str]) -> str:
    """The stage a sample's stack (innermost first) is in: see :data:`STAGES`."""
    names = {entry.split("@", 1)[0] for entry in stack}
    return next((stage for stage, function in STAGES if function in names), "other")


def main() -> None:
    out, log_path, command = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    samples: list[tuple[float, float, list[str]]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(samples, threading.get_ident(), stop))
    sampler.start()
    import autopart.launcher

    sys.argv = ["autopart", *command]
    try:
        autopart.launcher.main()
    except SystemExit:
        pass
    finally:
        stop.set()
        sampler.join()
    log_path.write_text(
        "".join(f"{t:7.1f} {gib:5.2f} {' < '.join(stack[:8])}\n" for t, gib, stack in samples)
    )
    rows = {}
    for seconds, gib, stack in samples:
        stage = stage_of(stack)
        if stage not in rows or gib > rows[stage]["peak_gib"]:
            where = " < ".join(stack[:4])
            rows[stage] = {
                "stage": stage,
                "peak_gib": round(gib, 2),
                "at_s": round(seconds),
                "where": where,
            }
    table = pd.DataFrame(sorted(rows.values(), key=lambda row: row["at_s"]))
    table.to_csv(out, index=False)
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
