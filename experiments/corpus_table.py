"""The corpus table: one row per model from exp_corpus.py's CSVs, and the Done-when figures.

Given several runs' CSVs, each (model, target) row comes from the last file that has it
(a later run replaces an earlier one). Each model gets one verdict: ``ok`` when every target
agrees with onnxruntime, else the worst status of its targets (crash, timeout, mismatch,
library, refused), with the target and the detail. Writes ``results/<tag>.csv``, ``.md`` and
``.png`` (every target's status, as exp_corpus draws it) and
prints the counts: per target, the share of models within the tolerance.

    python experiments/corpus_table.py results/corpus_diff_1128a.csv results/corpus_diff_1128b.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from exp_corpus import plot

RESULTS = Path(__file__).parent / "results"
WORST_FIRST = ("crash", "timeout", "oracle failed", "mismatch", "library", "refused", "ok")


def merged(paths: list[Path]) -> pd.DataFrame:
    """Every row of ``paths``, each (model, target) taken from the last file that has it."""
    frames = [pd.read_csv(path).assign(run=path.stem) for path in paths]
    rows = pd.concat(frames, ignore_index=True)
    rows = rows.drop_duplicates(subset=["model", "target"], keep="last").reset_index(drop=True)
    # runs before 2026-11-28 01:25 held models shipped quantised to 1e-3 despite their
    # own tolerance column: judge every row by its recorded error and tolerance
    if {"error", "tolerance"} <= set(rows.columns):
        within = (rows["status"] == "mismatch") & (rows["error"] <= rows["tolerance"])
        rows.loc[within, "status"] = "ok"
    return rows


def per_model(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per model: its verdict, the target and detail of its worst status."""
    table = []
    for model, group in rows.groupby("model", sort=False):
        rank = group["status"].map(WORST_FIRST.index)
        worst = group.loc[rank.idxmin()]
        statuses = dict(zip(group["target"], group["status"], strict=True))
        table.append(
            {
                "model": model,
                "source": worst["source"],
                "family": worst["family"],
                "verdict": worst["status"],
                "where": "" if worst["status"] == "ok" else worst["target"],
                "detail": "" if worst["status"] == "ok" else str(worst.get("detail", "")),
                **statuses,
            }
        )
    return pd.DataFrame(table)


def markdown(table: pd.DataFrame) -> str:
    """``table`` as a Markdown table (pipes in cells escaped)."""
    cells = table.astype(str).map(lambda text: text.replace("|", "\\|"))
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in cells.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csvs", nargs="+", type=Path)
    parser.add_argument("--tag", default="corpus_table")
    args = parser.parse_args()
    rows = merged(args.csvs)
    table = per_model(rows)
    table.to_csv(RESULTS / f"{args.tag}.csv", index=False)
    plot(rows, RESULTS / f"{args.tag}.png")
    (RESULTS / f"{args.tag}.md").write_text(markdown(table.fillna("")))
    print(table["verdict"].value_counts().to_string())
    for target, group in rows.groupby("target"):
        ok = int((group["status"] == "ok").sum())
        print(f"{target:<18} ok on {ok} of {len(group)} ({ok / len(group):.1%})")
    print(f"{len(table)} models; wrote {RESULTS / args.tag}.csv and .md")


if __name__ == "__main__":
    main()
