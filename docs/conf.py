"""Sphinx configuration for the cvfl documentation.

The built HTML must work with no network: MathJax comes from the ``sphinx-mathjax-offline``
package and the theme's fonts and icons are its own files (``docs/check_offline.py`` checks the
build). Notebooks under ``docs/notebooks/`` are executed on every build by myst-nb.
"""

import csv
import io
import os
import re
import sys

import matplotlib
from docutils.parsers.rst import directives
from sphinx.directives.patches import CSVTable

sys.path.insert(0, os.path.abspath(".."))
# Sphinx itself (autodoc imports, sphinx-gallery) draws off-screen. Notebook kernels inherit this
# process's environment, and ipykernel picks its inline backend only when MPLBACKEND is unset: an
# MPLBACKEND such as Agg would make every plot in an executed notebook vanish from its outputs.
matplotlib.use("Agg")
os.environ.pop("MPLBACKEND", None)
# no progress bars in the built pages: a widget would need the Jupyter widgets' scripts from a
# CDN, and a text bar is noise on a static page (the notebook kernels inherit this)
os.environ["CVFL_PROGRESS"] = "0"

project = "cvfl"
author = "the cvfl developers"
copyright = "2026, the cvfl developers"
release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "sphinx_gallery.gen_gallery",
    "myst_nb",
    # copies its bundled MathJax 3 into _build/html/_static/mathjax when the build finishes
    "sphinx-mathjax-offline",
]

# -- maths: MathJax from the PyPI package, loaded by a relative path ---------------------------
mathjax_path = "mathjax/tex-chtml.js"

# -- API docs --------------------------------------------------------------------------------
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"members": True, "show-inheritance": True}
nitpicky = False

# -- the API reference: one page per module, grouped, written here on every build ----------------
API_SECTIONS = [
    (
        "Mean estimation: encoders, protocols, verification",
        [
            "cvfl_theory",
            "cvfl_theory.encoders",
            "cvfl_theory.encoded",
            "cvfl_theory.protocols",
            "cvfl_theory.sampling",
            "cvfl_theory.rotation",
            "cvfl_theory.section5",
            "cvfl_theory.verify",
            "cvfl_theory.bitpack",
            "cvfl_theory.table",
            "cvfl_theory.store",
        ],
    ),
    (
        "Mean estimation: optimal probabilities for a bit budget",
        ["cvfl_theory.waterfill", "cvfl_theory.optimal", "cvfl_theory.tradeoff"],
    ),
    (
        "C-VFL compressors and bounds",
        [
            "cvfl_theory.compressors",
            "cvfl_theory.compressors.base",
            "cvfl_theory.compressors.quantizer",
            "cvfl_theory.compressors.scalar",
            "cvfl_theory.compressors.hexagonal",
            "cvfl_theory.compressors.topk",
            "cvfl_theory.compressors.identity",
            "cvfl_theory.compressors.report",
            "cvfl_theory.compressors.sweep",
            "cvfl_theory._kernels",
            "cvfl_theory.lattice",
            "cvfl_theory.bounds",
            "cvfl_theory.pep",
        ],
    ),
    (
        "Testing helpers",
        ["cvfl_theory.testing", "cvfl_theory.testing.exact", "cvfl_theory.testing.strategies"],
    ),
    (
        "Simulator: runs (cvfl_sim.vfl)",
        [
            "cvfl_sim",
            "cvfl_sim.vfl",
            "cvfl_sim.vfl.train",
            "cvfl_sim.vfl.config",
            "cvfl_sim.vfl.data",
            "cvfl_sim.vfl.paper_files",
            "cvfl_sim.vfl.sources",
            "cvfl_sim.vfl.models",
            "cvfl_sim.vfl.compressors",
            "cvfl_sim.vfl.schedules",
            "cvfl_sim.vfl.vectorised",
            "cvfl_sim.vfl.roles",
            "cvfl_sim.vfl.distributed",
            "cvfl_sim.vfl.namespaces",
            "cvfl_sim.vfl.transport",
            "cvfl_sim.vfl.steps",
            "cvfl_sim.vfl.evaluate",
            "cvfl_sim.vfl.joint_sgd",
            "cvfl_sim.vfl.ledger",
            "cvfl_sim.vfl.record",
            "cvfl_sim.vfl.results",
            "cvfl_sim.vfl.checkpoint",
            "cvfl_sim.vfl.files",
            "cvfl_sim.vfl.progress",
            "cvfl_sim.vfl.threads",
        ],
    ),
    (
        "Simulator: the theory checked on runs (cvfl_sim.bounds)",
        [
            "cvfl_sim.bounds",
            "cvfl_sim.bounds.hypotheses",
            "cvfl_sim.bounds.theorems",
            "cvfl_sim.bounds.certificate",
            "cvfl_sim.bounds.probes",
            "cvfl_sim.bounds.lemma1",
            "cvfl_sim.bounds.tight_term",
            "cvfl_sim.bounds.sampled_lemma1",
            "cvfl_sim.bounds.drift",
            "cvfl_sim.bounds.analytic_constants",
            "cvfl_sim.bounds.plotting",
        ],
    ),
    (
        "Simulator: the paper's experiments (cvfl_sim.experiments)",
        [
            "cvfl_sim.experiments",
            "cvfl_sim.experiments.compressors",
            "cvfl_sim.experiments.local_steps",
            "cvfl_sim.experiments.parties",
            "cvfl_sim.experiments.curves",
            "cvfl_sim.experiments.theorem_runs",
            "cvfl_sim.experiments.schedule_check",
            "cvfl_sim.experiments.latency",
            "cvfl_sim.experiments.specs",
            "cvfl_sim.experiments.sweep",
            "cvfl_sim.experiments.tables",
            "cvfl_sim.experiments.plotting",
            "cvfl_sim.experiments.timing",
            "cvfl_sim.experiments.reference_data",
            "cvfl_sim.experiments.verify_suite",
        ],
    ),
    (
        "Simulator: the command line (cvfl_sim.commands)",
        [
            "cvfl_sim.commands",
            "cvfl_sim.commands.cli",
            "cvfl_sim.commands.verify",
            "cvfl_sim.commands.optimize",
            "cvfl_sim.commands.compare",
            "cvfl_sim.commands.train",
            "cvfl_sim.commands.bound",
            "cvfl_sim.commands.reproduce",
        ],
    ),
]
"""The modules of the API reference, in the order of its index; every public module is listed
(``tests/test_docs_api.py`` checks it). Each gets its own page under ``api/``."""

# packages whose __all__ re-exports their modules' names: their pages show the docstring alone
# (the names are documented on their own modules' pages)
_REEXPORTING = {"cvfl_theory", "cvfl_sim", "cvfl_theory.compressors"}


def _write_if_changed(path, text):
    old = open(path).read() if os.path.exists(path) else None
    if old != text:
        with open(path, "w") as f:
            f.write(text)


def write_api_pages(folder):
    """Write ``api/index.rst`` (a toctree per section) and one ``api/<module>.rst`` per module."""
    os.makedirs(folder, exist_ok=True)
    index = ["API reference", "=============", ""]
    index.append("One page per module. The simulator's four wings (:doc:`../architecture`) import")
    index.append("only downward: ``commands`` → ``experiments`` → ``bounds`` → ``vfl``.")
    index.append("")
    for title, modules in API_SECTIONS:
        index += [title, "-" * len(title), "", ".. toctree::", "   :maxdepth: 1", ""]
        index += [f"   {m}" for m in modules]
        index.append("")
        for m in modules:
            opts = ["   :no-members:"] if m in _REEXPORTING else []
            body = [m, "=" * len(m), "", f".. automodule:: {m}", *opts, ""]
            _write_if_changed(os.path.join(folder, f"{m}.rst"), "\n".join(body))
    _write_if_changed(os.path.join(folder, "index.rst"), "\n".join(index))


write_api_pages(os.path.join(os.path.dirname(os.path.abspath(__file__)), "api"))

# -- executed examples (sphinx-gallery) ------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    # every example page links its .py and .ipynb; the gallery index links zips of all of them
    "download_all_examples": True,
    "first_notebook_cell": None,
    # each cell shows its code, then what it printed, then the repr of its last expression
    "capture_repr": ("_repr_html_", "__repr__"),
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    # the timing pages load jQuery and DataTables from a CDN: not written (and excluded below)
    "write_computation_times": False,
}

# -- executed notebooks (myst-nb) ------------------------------------------------------------
# Every notebook is run from scratch on every build, so `make docs` (and `make test`) fails if a
# cell raises. The kernel is the ipykernel of the Python running Sphinx (the project's venv).
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_allow_errors = False
nb_execution_show_tb = True
nb_execution_timeout = 180
nb_execution_excludepatterns = ["auto_examples/*"]
nb_kernel_rgx_aliases = {".*": "python3"}
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath"]

exclude_patterns = [
    "_build",
    "examples",
    # sphinx-gallery's downloads, not pages
    "auto_examples/*.ipynb",
    "auto_examples/*.py",
    "**/*.md5",
    "**/*.codeobj.json",
    "sg_execution_times.rst",
    "auto_examples/sg_execution_times.rst",
    # experiment outputs: their .md/.csv tables are included by results.rst, not pages of their own
    "results/**",
    "**/.ipynb_checkpoints",
]

# -- HTML ------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = "cvfl"
html_static_path = ["_static"]
html_css_files = ["cvfl.css"]
# "Show Source" serves each page's file as it is, so a notebook's link downloads the .ipynb
html_sourcelink_suffix = ""
html_theme_options = {
    # nothing that loads from another site: no icon links, analytics, version switcher or ads
    "icon_links": [],
    "navbar_end": ["theme-switcher"],
    "primary_sidebar_end": [],
    "footer_end": [],
    "show_toc_level": 2,
    "navigation_depth": 3,
    "secondary_sidebar_items": ["page-toc", "sourcelink"],
    "show_prev_next": True,
}
# pages with wide tables or thumbnails drop the left (site navigation) sidebar
html_sidebars = {"results": [], "auto_examples/index": []}

# numpydoc-style types such as "array of shape (n, d)" are prose, not cross-references
suppress_warnings = ["config.cache", "ref.python"]


# -- results tables: the experiments' markdown tables as real HTML tables --------------------
_MD_RULE = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")


def markdown_table_rows(lines):
    """Return the cells of the first pipe table in markdown ``lines`` (header row first)."""
    rows, started = [], False
    for line in lines:
        text = line.strip()
        if text.startswith("|"):
            started = True
            if not _MD_RULE.match(text):
                inner = text[1:-1] if text.endswith("|") and len(text) > 1 else text[1:]
                rows.append([cell.strip() for cell in inner.split("|")])
        elif started:
            break
    return rows


class MarkdownTable(CSVTable):
    """``.. md-table:: caption`` with ``:file: x.md``: the file's first pipe table as a table.

    The experiments write each table twice, as raw ``.csv`` and as ``.md`` with numbers rounded
    for reading (``cvfl_sim.experiments.tables.write_table``); this is ``csv-table`` fed from the
    ``.md``, so the page shows the rounded numbers and follows every rerun. The first row is the
    header; the table gets the ``cvfl-results`` class (compact, scrolls when wide).
    ``:columns: a, b=label, ...`` keeps only the named columns (renamed after ``=``), so that a
    page shows the few that fit; the page then links the whole file.
    """

    option_spec = {**CSVTable.option_spec, "columns": directives.unchanged}

    def get_csv_data(self):
        lines, source = super().get_csv_data()
        rows = markdown_table_rows(lines)
        if not rows:
            raise self.error(f"md-table: no markdown pipe table in {source}")
        ragged = [i for i, row in enumerate(rows) if len(row) != len(rows[0])]
        if ragged:
            raise self.error(
                f"md-table: rows {ragged} of {source} do not have the header's {len(rows[0])} cells"
            )
        if "columns" in self.options:
            wanted = [c.strip() for c in self.options["columns"].split(",") if c.strip()]
            names = [c.split("=", 1)[0].strip() for c in wanted]
            missing = [n for n in names if n not in rows[0]]
            if missing:
                raise self.error(f"md-table: {source} has no columns {missing}")
            keep = [rows[0].index(n) for n in names]
            labels = [c.split("=", 1)[1].strip() if "=" in c else c for c in wanted]
            rows = [labels] + [[row[k] for k in keep] for row in rows[1:]]
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        return out.getvalue().splitlines(), source

    def run(self):
        self.options.setdefault("header-rows", 1)
        self.options.setdefault("widths", "auto")
        self.options["class"] = [*self.options.get("class", []), "cvfl-results"]
        return super().run()


def setup(app):
    """Register the ``md-table`` directive."""
    app.add_directive("md-table", MarkdownTable)
