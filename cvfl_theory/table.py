"""A small result table that prints as text, renders as HTML in Jupyter and saves as CSV.

Used by :func:`cvfl_theory.verify.verify`, :func:`cvfl_theory.section5.table1` and the other
reports, so every report looks the same in a terminal, a notebook and a file.
"""

from __future__ import annotations

import csv
import html
import io
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ._atomic import atomic_write_text
from ._export import dataframe

__all__ = ["Table", "format_value", "TEXT_WIDTH", "text_width"]

TEXT_WIDTH: int | None = 100
"""Widest text line a :class:`Table` prints by default (``None``: no limit); see :func:`text_width`."""


def format_value(v: Any) -> str:
    """Format one cell: floats with 6 significant digits, booleans as PASS/FAIL."""
    if isinstance(v, bool):
        return "PASS" if v else "FAIL"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


_REPR_ROWS = 10
"""Tables with at most this many rows show them all in ``repr``; longer ones show the first few."""
_REPR_HEAD = 5


@contextmanager
def text_width(width: int | None) -> Iterator[None]:
    """Print tables at most ``width`` characters wide inside the block.

    ``None`` prints every column on one line, as ``cvfl ... --wide`` does.

    Examples
    --------
    >>> with text_width(None):
    ...     pass
    """
    global TEXT_WIDTH
    if width is not None and (isinstance(width, bool) or not isinstance(width, int) or width < 20):
        raise ValueError(f"width must be an integer >= 20 or None, got {width!r}")
    saved = TEXT_WIDTH
    TEXT_WIDTH = width
    try:
        yield
    finally:
        TEXT_WIDTH = saved


def _wrap(text: str, width: int) -> list[str]:
    """``text`` on lines of at most ``width`` characters where it has spaces to break at."""
    if len(text) <= width:
        return [text]
    import textwrap

    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [text]


class Table:
    """Rows of named columns with text, HTML and CSV renderings.

    As text (:meth:`to_text`, ``str``) a table wider than :data:`TEXT_WIDTH` (100 characters) is
    printed in panels: the first ``key_columns`` columns, then as many further columns as fit,
    panel after panel. Column groups (``groups``) are printed as a heading line above their
    columns, and as spanning headers in HTML.

    Parameters
    ----------
    columns : sequence of str
        Column names.
    rows : sequence of sequence
        Row values, one per column.
    title : str
        Optional caption.
    groups : sequence of (str, int), optional
        Column group headings: ``(heading, number of columns)`` in column order, covering every
        column (an empty heading for ungrouped columns).
    key_columns : int
        Leading columns repeated in every panel of a wide table (default 1).

    Examples
    --------
    >>> t = Table(["a", "b"], [[1, 0.5]], title="demo")
    >>> print(t)
    demo
    a  b
    -  ---
    1  0.5
    >>> t
    <Table 'demo': 1 row x 2 columns>
    a  b
    -  ---
    1  0.5
    """

    def __init__(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        title: str = "",
        *,
        groups: Sequence[tuple[str, int]] | None = None,
        key_columns: int = 1,
    ):
        self.columns = list(columns)
        self.rows = [list(r) for r in rows]
        self.title = title
        for r in self.rows:
            if len(r) != len(self.columns):
                raise ValueError(f"row {r} has {len(r)} cells, expected {len(self.columns)}")
        self.groups = None if groups is None else [(str(g), int(n)) for g, n in groups]
        if self.groups is not None and (
            sum(n for _, n in self.groups) != len(self.columns)
            or any(n < 1 for _, n in self.groups)
        ):
            raise ValueError(
                f"groups must cover the {len(self.columns)} columns with spans >= 1, got "
                f"{self.groups}"
            )
        if not 0 <= key_columns <= len(self.columns):
            raise ValueError(f"key_columns must be in [0, {len(self.columns)}], got {key_columns}")
        self.key_columns = key_columns

    def _group_of(self) -> list[str]:
        """The group heading of every column (all empty without groups)."""
        if self.groups is None:
            return [""] * len(self.columns)
        return [g for g, n in self.groups for _ in range(n)]

    def column(self, name: str) -> list[Any]:
        """All values of one column."""
        k = self.columns.index(name)
        return [r[k] for r in self.rows]

    def __len__(self) -> int:
        return len(self.rows)

    def to_text(self, width: int | None = -1) -> str:
        """The table as text, in panels of at most ``width`` characters.

        ``width`` defaults (``-1``) to :data:`TEXT_WIDTH`; ``None`` prints each row on one line,
        however wide. Where a panel of the key columns and one more column is still too wide, that
        column's long cells are wrapped onto further lines (at spaces, never inside a word).
        """
        cells = [self.columns] + [[format_value(v) for v in r] for r in self.rows]
        widths = [max(len(row[k]) for row in cells) for k in range(len(self.columns))]
        group = self._group_of()
        # a group heading wider than its columns widens its last column
        k = 0
        for g, n in self.groups or []:
            span = sum(widths[k : k + n]) + 2 * (n - 1)
            if len(g) > span:
                widths[k + n - 1] += len(g) - span
            k += n
        panels = self._panels(widths, width)
        limit = TEXT_WIDTH if width == -1 else width
        lines = _wrap(self.title, limit) if self.title and limit is not None else []
        if self.title and limit is None:
            lines = [self.title]
        for i, cols in enumerate(panels):
            if i:
                lines.append("")
            if self.groups is not None:
                heads, j = [], 0
                while j < len(cols):
                    g, n = group[cols[j]], 1
                    while (
                        j + n < len(cols) and group[cols[j + n]] == g and cols[j + n] == cols[j] + n
                    ):
                        n += 1
                    span = sum(widths[c] for c in cols[j : j + n]) + 2 * (n - 1)
                    heads.append(g.center(span) if g else " " * span)
                    j += n
                if any(group[c] for c in cols):
                    lines.append("  ".join(heads).rstrip())
            shown = dict(zip(cols, (widths[c] for c in cols)))
            limit = TEXT_WIDTH if width == -1 else width
            last = cols[-1]
            room = None if limit is None else limit - sum(shown[c] + 2 for c in cols[:-1])
            if room is not None and shown[last] > room and room >= 20:
                shown[last] = room  # wrap the last column's cells into the room left
            lines.append("  ".join(cells[0][c].ljust(shown[c]) for c in cols).rstrip())
            lines.append("  ".join("-" * shown[c] for c in cols))
            for row in cells[1:]:
                parts = {c: _wrap(row[c], shown[c]) for c in cols}
                for k in range(max(len(v) for v in parts.values())):
                    lines.append(
                        "  ".join(
                            (parts[c][k] if k < len(parts[c]) else "").ljust(shown[c]) for c in cols
                        ).rstrip()
                    )
        return "\n".join(lines)

    def _panels(self, widths: list[int], width: int | None) -> list[list[int]]:
        """Column indices of each panel: the key columns, then further columns while they fit."""
        limit = TEXT_WIDTH if width == -1 else width
        every = list(range(len(widths)))
        if limit is None or sum(widths) + 2 * (len(widths) - 1) <= limit:
            return [every]
        keys = every[: self.key_columns]
        used = sum(widths[c] + 2 for c in keys)
        group = self._group_of()
        panels: list[list[int]] = []
        current: list[int] = []
        size = used
        for c in every[self.key_columns :]:
            if current and size + widths[c] > limit:
                # break before the group that would be cut, when the panel keeps other columns
                start = len(current)
                while start > 0 and group[c] and group[current[start - 1]] == group[c]:
                    start -= 1
                if start == 0:  # the whole panel is this group: cut the group here
                    start = len(current)
                carry = current[start:]
                panels.append(keys + current[:start])
                current = carry
                size = used + sum(widths[k] + 2 for k in carry)
            current.append(c)
            size += widths[c] + 2
        if current or not panels:
            panels.append(keys + current)
        return panels

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        """Title, size and columns, then the first rows as text (all of them if at most 10)."""
        n = len(self.rows)
        head = (
            f"<Table {self.title!r}: {n} row{'s' if n != 1 else ''} x {len(self.columns)} columns>"
        )
        shown = self.rows if n <= _REPR_ROWS else self.rows[:_REPR_HEAD]
        body = str(Table(self.columns, shown, groups=self.groups, key_columns=self.key_columns))
        more = f"\n... {n - len(shown)} more rows" if len(shown) < n else ""
        return f"{head}\n{body}{more}"

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        if self.groups is not None:
            spans = "".join(
                f'<th colspan="{n}" style="text-align:center">{html.escape(g)}</th>'
                for g, n in self.groups
            )
            head = f"{spans}</tr><tr>{head}"
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(format_value(v))}</td>" for v in r) + "</tr>"
            for r in self.rows
        )
        cap = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def to_csv(self, path: str | os.PathLike[str] | None = None) -> str:
        """Return the table as CSV text; also write it atomically to ``path`` if given."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows(self.rows)
        text = buf.getvalue()
        if path is not None:
            atomic_write_text(path, text)
        return text

    def to_dataframe(self) -> Any:
        """The table as a :class:`pandas.DataFrame`, columns in the order :meth:`to_csv` writes.

        The title is kept in ``DataFrame.attrs["title"]``. Needs pandas (``cvfl[dataframe]``).
        """
        df = dataframe(self.columns, self.rows)
        df.attrs["title"] = self.title
        return df

    def to_markdown(self) -> str:
        """The table as GitHub-flavoured markdown (a column's group prefixes its name)."""
        names = [f"{g}: {c}" if g else c for g, c in zip(self._group_of(), self.columns)]
        lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(format_value(v) for v in r) + " |" for r in self.rows]
        return "\n".join(lines)
