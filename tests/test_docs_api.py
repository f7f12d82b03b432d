"""The API reference has a page for every public module, under one of its sections (issue 21)."""

import ast

from _helpers import ROOT


def _api_sections():
    """``API_SECTIONS`` of ``docs/conf.py``, read without running the configuration."""
    tree = ast.parse((ROOT / "docs" / "conf.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "API_SECTIONS" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("docs/conf.py defines no API_SECTIONS")


def _public_modules():
    out = set()
    for package in ("cvfl_theory", "cvfl_sim"):
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if not any(p.startswith("_") for p in parts):
                out.add(".".join(parts))
    return out


def test_every_public_module_has_a_page_in_one_section():
    listed = [m for _, modules in _api_sections() for m in modules]
    assert len(listed) == len(set(listed)), "a module is listed twice"
    missing = _public_modules() - set(listed)
    assert missing == set()
    assert set(listed) - _public_modules() <= {"cvfl_theory._kernels"}  # compiled, documented
