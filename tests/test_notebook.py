"""The quickstart notebook is clean and asserts its answers; plot helpers display in a notebook.

The docs build executes ``docs/notebooks/quickstart.ipynb`` (so ``make test`` runs it end to end);
here it is only checked statically, to keep the test suite fast. One small notebook is executed
with nbclient in a real kernel: a plot helper called in a cell must produce an ``image/png``
output, as users expect of matplotlib helpers (issue 12).
"""

import ast
import base64
import re

import pytest
from _helpers import ROOT

nbformat = pytest.importorskip("nbformat")

NOTEBOOK = ROOT / "docs" / "notebooks" / "quickstart.ipynb"
SECTIONS = {
    1: "verify the K1.2 MSE",
    2: "optimise p for a bit budget",
    3: "compare the compressors with the published bounds",
    4: "run C-VFL and check its bound",
}


def _read():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    return nb


def _python(source: str) -> ast.Module:
    """Parse a code cell, dropping IPython magics (``%...``, ``!...``)."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    return ast.parse("\n".join(lines))


def _sections(nb) -> dict[int, list[str]]:
    """Code cell sources under each ``## <k>.`` heading."""
    out: dict[int, list[str]] = {}
    current = None
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                m = re.match(r"##\s+(\d+)\.\s+(.*)", line)
                if m:
                    current = int(m.group(1))
                    out[current] = []
                    if SECTIONS.get(current, "").lower() not in m.group(2).lower():
                        raise AssertionError(f"section {current} is titled {m.group(2)!r}")
        elif cell.cell_type == "code" and current is not None:
            out[current].append(cell.source)
    return out


def test_quickstart_is_valid_and_has_no_outputs():
    nb = _read()
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the notebook has no code"
    for cell in code:
        assert cell.outputs == [], f"stored outputs in cell {cell.source[:60]!r}"
        assert cell.execution_count is None
        _python(cell.source)  # valid Python apart from magics


def test_quickstart_sections_assert_their_answers():
    sections = _sections(_read())
    assert sorted(sections) == sorted(SECTIONS)
    for k, sources in sections.items():
        asserts = [
            node
            for src in sources
            for node in ast.walk(_python(src))
            if isinstance(node, ast.Assert)
        ]
        assert asserts, f"section {k} ({SECTIONS[k]}) asserts nothing"


def test_quickstart_bounds_one_torch_thread():
    sources = "\n".join(c.source for c in _read().cells if c.cell_type == "code")
    assert "torch.set_num_threads(1)" in sources


def test_plot_helper_displays_an_image_in_a_notebook(run_notebook):
    cell = (
        "import numpy as np\n"
        "from cvfl_theory import plot_tradeoff, tradeoff_curve\n"
        "X = np.random.default_rng(0).standard_t(2.5, size=(4, 32))\n"
        "plot_tradeoff(tradeoff_curve(X, [2000.0, 4000.0], "
        'methods=("uniform", "binary")))'
    )
    outputs = run_notebook([cell])[0].outputs
    assert not [o for o in outputs if o.output_type == "error"], outputs
    images = [o.data["image/png"] for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 1, f"expected one image output, got {[o.get('data', o) for o in outputs]}"
    png = base64.b64decode(images[0])
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000


def test_training_in_a_notebook_shows_a_progress_widget(run_notebook):
    cell = (
        "from cvfl_sim import CVFLConfig, load_dataset, train\n"
        "run = train(load_dataset('breast-cancer'), CVFLConfig(Q=2, epochs=2, progress=True))\n"
        "print('rows', len(run.history))"
    )
    quiet = "train(load_dataset('breast-cancer'), CVFLConfig(Q=2, epochs=1)); print('quiet')"
    first, second = run_notebook([cell, quiet])
    assert not [o for o in first.outputs if o.output_type == "error"], first.outputs
    # tqdm.auto in a kernel with ipywidgets: a widget view (with a text fallback)
    widgets = [
        o for o in first.outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert widgets, [o.get("data", o) for o in first.outputs]
    assert widgets[0]["data"]["text/plain"].startswith("C-VFL breast-cancer:")
    assert any("rows 3" in o.get("text", "") for o in first.outputs)
    # progress=False (the default): nothing but the cell's own print (which the kernel may send
    # in more than one stream message when it is busy)
    assert all(o.output_type == "stream" for o in second.outputs), second.outputs
    assert "".join(o.get("text", "") for o in second.outputs) == "quiet\n"
