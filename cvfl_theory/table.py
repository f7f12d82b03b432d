"""A small result table that prints as text, renders as HTML in Jupyter and saves as CSV.

Used by :func:`cvfl_theory.verify.verify`, :func:`cvfl_theory.section5.table1` and the other
reports, so every report looks the same in a terminal, a notebook and a file.
"""

from __future__ import annotations

import csv
import html
import io
import os
from collections.abc import Sequence
from typing import Any

from ._atomic import atomic_write_text
from ._export import dataframe

__all__ = ["Table", "format_value"]


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


class Table:
    """Rows of named columns with text, HTML and CSV renderings.

    Parameters
    ----------
    columns : sequence of str
        Column names.
    rows : sequence of sequence
        Row values, one per column.
    title : str
        Optional caption.

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

    def __init__(self, columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str = ""):
        self.columns = list(columns)
        self.rows = [list(r) for r in rows]
        self.title = title
        for r in self.rows:
            if len(r) != len(self.columns):
                raise ValueError(f"row {r} has {len(r)} cells, expected {len(self.columns)}")

    def column(self, name: str) -> list[Any]:
        """All values of one column."""
        k = self.columns.index(name)
        return [r[k] for r in self.rows]

    def __len__(self) -> int:
        return len(self.rows)

    def __str__(self) -> str:
        cells = [self.columns] + [[format_value(v) for v in r] for r in self.rows]
        widths = [max(len(row[k]) for row in cells) for k in range(len(self.columns))]
        lines = [self.title] if self.title else []
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells[0], widths)).rstrip())
        lines.append("  ".join("-" * w for w in widths))
        for row in cells[1:]:
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        return "\n".join(lines)

    def __repr__(self) -> str:
        """Title, size and columns, then the first rows as text (all of them if at most 10)."""
        n = len(self.rows)
        head = (
            f"<Table {self.title!r}: {n} row{'s' if n != 1 else ''} x {len(self.columns)} columns>"
        )
        shown = self.rows if n <= _REPR_ROWS else self.rows[:_REPR_HEAD]
        body = str(Table(self.columns, shown))
        more = f"\n... {n - len(shown)} more rows" if len(shown) < n else ""
        return f"{head}\n{body}{more}"

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
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
        """The table as GitHub-flavoured markdown."""
        lines = ["| " + " | ".join(self.columns) + " |", "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(format_value(v) for v in r) + " |" for r in self.rows]
        return "\n".join(lines)
