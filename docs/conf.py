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
from sphinx.directives.patches import CSVTable

sys.path.insert(0, os.path.abspath(".."))
# Sphinx itself (autodoc imports, sphinx-gallery) draws off-screen. Notebook kernels inherit this
# process's environment, and ipykernel picks its inline backend only when MPLBACKEND is unset: an
# MPLBACKEND such as Agg would make every plot in an executed notebook vanish from its outputs.
matplotlib.use("Agg")
os.environ.pop("MPLBACKEND", None)

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
    for reading (``cvfl_sim.experiments.write_table``); this is ``csv-table`` fed from the
    ``.md``, so the page shows the rounded numbers and follows every rerun. The first row is the
    header; the table gets the ``cvfl-results`` class (compact, scrolls when wide).
    """

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
