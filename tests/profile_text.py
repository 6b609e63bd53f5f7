"""Editing the table of a saved profile as a person would, then sealing it again.

A profile file checks every row (:mod:`autopart.profile.integrity`), so a cell changed
in place is a damaged row, dropped on reading. Tests of the validation behind the checks
edit cells here and write the rows back with fresh checks, as autopart itself would.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from autopart.profile.integrity import read_text, write_text


def rewrite_rows(text: str, edit: Callable[[pd.DataFrame], pd.DataFrame]) -> str:
    """``text`` (a current profile file) with ``edit`` applied to its table of cell texts."""
    _, meta, cells, dropped = read_text(text, "<edited>")
    assert not dropped.count, dropped
    edited = edit(cells.copy())
    return write_text(meta, list(edited.columns), edited.itertuples(index=False))


def cells(text: str) -> pd.DataFrame:
    """The table of a current profile file, as the texts of its cells."""
    return read_text(text, "<read>")[2]
