"""Every THEORY label the code cites has an anchor in the theory pages (issue 12).

The code cites the labels of THEORY.md (``K1.2``, ``C5.1``, ``THEORY C4.5``, ...) in docstrings
and comments; ``docs/theory/*.rst`` gives each an anchor ``.. _label-k1-2:`` (lower case, dots
become dashes). The labels are collected from string and comment tokens only (``tokenize``), so a
name in code such as ``C1 = 3`` is not a citation. No Sphinx build is needed.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cvfl_theory", "cvfl_sim", "proofs_checks")
THEORY_PAGES = ROOT / "docs" / "theory"

# K or C, one digit, optionally ".digits"; not part of a longer word or number (K12, AC1, K1.2.3).
LABEL = re.compile(r"(?<![\w.])[KC]\d(?:\.\d+)?(?![\w]|\.\d)")
ANCHOR = re.compile(r"^\.\. _(label-[a-z0-9-]+):\s*$", re.MULTILINE)

# Every label of THEORY.md; the pages must anchor all of them, cited by the code or not.
THEORY_LABELS = (
    ["K0", "K1", "K1.1", "K1.2", "K2", "K2.1", "K2.2", "K3", "K3.1", "K3.2", "K4"]
    + ["K5", "K5.1", "K5.2", "K6"]
    + [f"K6.{i}" for i in range(1, 8)]
    + [f"C{i}" for i in range(10)]
    + [f"C3.{i}" for i in range(1, 6)]
    + [f"C4.{i}" for i in range(1, 6)]
    + [f"C5.{i}" for i in range(1, 6)]
)
_TEXT_TOKENS = {tokenize.STRING, tokenize.COMMENT} | (
    {tokenize.FSTRING_MIDDLE} if hasattr(tokenize, "FSTRING_MIDDLE") else set()
)


def cited_labels(source: str) -> set[str]:
    """The THEORY labels cited in the strings (docstrings included) and comments of ``source``."""
    found: set[str] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in _TEXT_TOKENS:
            found.update(LABEL.findall(tok.string))
    return found


def anchor_name(label: str) -> str:
    """The Sphinx label of a THEORY label: ``K1.2`` -> ``label-k1-2``."""
    return "label-" + label.lower().replace(".", "-")


def anchors(pages: list[Path]) -> set[str]:
    """All ``.. _label-...:`` targets defined in the given rst files."""
    names: set[str] = set()
    for page in pages:
        names.update(ANCHOR.findall(page.read_text(encoding="utf-8")))
    return names


def missing(labels: set[str], defined: set[str]) -> list[str]:
    """The labels whose anchor is not defined, sorted."""
    return sorted(label for label in labels if anchor_name(label) not in defined)


def _code_citations() -> dict[str, list[str]]:
    cites: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for label in cited_labels(path.read_text(encoding="utf-8")):
                cites.setdefault(label, []).append(str(path.relative_to(ROOT)))
    return cites


def _theory_pages() -> list[Path]:
    pages = sorted(THEORY_PAGES.glob("*.rst"))
    assert pages, f"no rst pages under {THEORY_PAGES}"
    return pages


def test_every_label_cited_by_the_code_has_an_anchor():
    cites = _code_citations()
    # the scan must see the code's citations at all (guards against a broken pattern)
    assert {"K1.2", "K6.2", "C4.5", "C5.2"} <= set(cites), sorted(cites)
    absent = missing(set(cites), anchors(_theory_pages()))
    assert not absent, {label: cites[label][:3] for label in absent}


def test_every_theory_label_has_an_anchor():
    absent = missing(set(THEORY_LABELS), anchors(_theory_pages()))
    assert not absent, absent


def test_anchors_are_defined_once():
    text = "\n".join(p.read_text(encoding="utf-8") for p in _theory_pages())
    names = ANCHOR.findall(text)
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})


def test_a_made_up_label_is_reported(tmp_path):
    source = (
        "C1 = 3  # a name in code is not a citation\n"
        "def f():\n"
        '    r"""Implements K9.7 (THEORY) and K1.2; see also THEORY C7."""\n'
        "    return 'K12 AC1 K1.2.3'  # K6.2, C8.8\n"
    )
    assert cited_labels(source) == {"K9.7", "K1.2", "C7", "K6.2", "C8.8"}
    page = tmp_path / "page.rst"
    page.write_text(".. _label-k1-2:\n\nK1.2\n----\n\n.. _label-k6-2:\n\n.. _label-c7:\n")
    assert missing(cited_labels(source), anchors([page])) == ["C8.8", "K9.7"]
    # and the real pages do not define them either
    assert missing({"K9.7", "C8.8"}, anchors(_theory_pages())) == ["C8.8", "K9.7"]


# The team's internal reference is not shipped: no page, docstring, CLI message or proofs-check
# note may send a user to it (its labels are anchored in the theory pages instead).
INTERNAL_REFERENCE = re.compile(r"THEORY(?:\.md|\s+[KC]\d)")


def _shipped_text_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for package in PACKAGES:
        files += sorted((ROOT / package).rglob("*.py"))
    docs = ROOT / "docs"
    for pattern in ("*.rst", "*.ipynb", "*.py", "*.md", "*.txt", "*.csv"):
        files += [
            p
            for p in sorted(docs.rglob(pattern))
            if not {"_build", "api", "auto_examples"} & set(p.relative_to(docs).parts)
        ]
    return files


def test_no_shipped_text_cites_the_internal_reference():
    files = _shipped_text_files()
    assert len(files) > 50
    cited = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in files
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if INTERNAL_REFERENCE.search(line)
    ]
    assert cited == []


def test_the_internal_reference_pattern_catches_its_forms():
    for text in ("see THEORY.md K1.2", "(THEORY C4.5)", "THEORY K6"):
        assert INTERNAL_REFERENCE.search(text)
    for text in ("THEORY_TRIES = 6", "the theory pages (K1.2)", "Theory"):
        assert not INTERNAL_REFERENCE.search(text)
