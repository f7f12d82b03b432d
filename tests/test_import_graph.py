"""The packages' import graphs (issue 18): no cycles, imports only downward between the simulator's
wings, no private name taken from another module, and cvfl_theory never imports cvfl_sim.

The checker (``tests/import_graph.py``) is tested first on a small package written here with one
of each fault, so a checker that finds nothing cannot pass.
"""

import textwrap

import pytest
from _helpers import ROOT
from import_graph import read, upward

WINGS = {"vfl": 0, "bounds": 1, "experiments": 2, "commands": 3}
"""The floors of cvfl_sim: ``commands`` → ``experiments`` → ``bounds`` → ``vfl``."""


@pytest.fixture(scope="module")
def graph():
    return read(ROOT / "cvfl_sim", ROOT / "cvfl_theory")


def test_no_cycles(graph):
    assert graph.cycles() == []


def test_wings_import_only_downward(graph):
    assert upward(graph, "cvfl_sim", WINGS) == []
    assert set(WINGS) <= {m.split(".")[1] for m in graph.files if m.count(".") >= 1}


def test_no_private_name_taken_across_modules(graph):
    assert graph.private == []


def test_theory_never_imports_the_simulator(graph):
    bad = [
        f"{src} imports {dst}"
        for src, dsts in graph.edges.items()
        if src.startswith("cvfl_theory")
        for dst in dsts
        if dst.startswith("cvfl_sim")
    ]
    assert bad == []


def test_every_module_of_the_simulator_is_in_a_wing(graph):
    loose = [m for m in graph.files if m.startswith("cvfl_sim.") and m.split(".")[1] not in WINGS]
    assert loose == []


def test_every_name_a_module_exports_is_its_own(graph):
    """``__all__`` lists names the module defines (a name moved away would be caught here)."""
    import importlib
    import inspect

    wrong = []
    for name in sorted(graph.files):
        module = importlib.import_module(name)
        for item in getattr(module, "__all__", []):
            if name in ("cvfl_sim", "cvfl_theory", "cvfl_theory.compressors"):
                getattr(module, item)  # the packages' faces re-export: the name must resolve
                continue
            obj = getattr(module, item, None)
            if obj is None:
                wrong.append(f"{name}.{item} is missing")
            elif (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ not in (
                name,
                "typing",  # a type alias (RNGLike = int | Generator | ...) is the module's own
            ):
                wrong.append(f"{name}.{item} is {obj.__module__}'s")
    assert wrong == []


def _package(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return read(tmp_path / "pkg")


def test_the_checker_finds_each_fault(tmp_path):
    g = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": """
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from ..high.c import Thing  # never runs: not an edge
                def f():
                    from ..high import c  # a lazy import is an import: upward
                    return c
                _secret = 1
            """,
            "low/b.py": """
                from . import a
                from .a import _secret
                from . import _shared
                def g():
                    return a._secret, _shared.helper
            """,
            "low/_shared.py": "helper = 1\nfrom . import b\n",
            "high/__init__.py": "",
            "high/c.py": "import os\n",
        },
    )
    assert g.cycles() == [["pkg.low._shared", "pkg.low.b"]]
    assert upward(g, "pkg", {"low": 0, "high": 1}) == ["pkg.low.a imports pkg.high.c"]
    # _shared is a module (allowed); _secret is a name, taken twice
    assert g.private == ["pkg.low.b takes _secret from pkg.low.a"]


def test_the_public_face_is_above_every_wing(tmp_path):
    g = _package(
        tmp_path,
        {
            "__init__.py": "def __getattr__(n):\n    from .low import a\n",
            "low/__init__.py": "",
            "low/a.py": "from .. import x\n",
            "x.py": "",
        },
    )
    assert upward(g, "pkg", {"low": 0}) == ["pkg.low.a imports pkg.x"]
