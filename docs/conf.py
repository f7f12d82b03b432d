"""Sphinx configuration for the cvfl documentation."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))
os.environ.setdefault("MPLBACKEND", "Agg")

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
]

napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"members": True, "show-inheritance": True}
nitpicky = False

sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
}

exclude_patterns = [
    "_build",
    "examples",
    "auto_examples/*.ipynb",
    "auto_examples/*.py",
    "**/*.md5",
    "**/*.codeobj.json",
    "sg_execution_times.rst",
]
html_theme = "alabaster"
html_static_path: list[str] = []
# numpydoc-style types such as "array of shape (n, d)" are prose, not cross-references
suppress_warnings = ["config.cache", "ref.python"]
