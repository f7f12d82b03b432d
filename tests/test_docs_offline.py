"""Tests of ``docs/check_offline.py``, the check that built docs load nothing from the network.

``make docs`` runs the checker on the real build; these tests feed it synthetic pages whose
verdict is known by construction.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from _helpers import ROOT

_PATH = ROOT / "docs" / "check_offline.py"
_spec = importlib.util.spec_from_file_location("check_offline", _PATH)
assert _spec is not None and _spec.loader is not None
check_offline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_offline)

PAGE = "<!DOCTYPE html><html><head>{head}</head><body>{body}</body></html>"


def page(head: str = "", body: str = "") -> str:
    return PAGE.format(head=head, body=body)


@pytest.mark.parametrize(
    "url",
    [
        "http://cdn.example.org/mathjax/tex-chtml.js",
        "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js",
        "HTTPS://CDN.EXAMPLE.ORG/A.JS",
        "//cdn.example.org/protocol-relative.js",
        "  https://cdn.example.org/leading-space.js",
    ],
)
def test_external_script_is_flagged(url: str) -> None:
    found = check_offline.external_html_resources(page(head=f'<script src="{url}"></script>'))
    assert found == [f"<script src={url}>"]


@pytest.mark.parametrize(
    "link",
    [
        '<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Lato">',
        '<link href="http://cdn.example.org/theme.css" rel="stylesheet" type="text/css" />',
        '<link rel="preload" as="font" href="https://example.org/f.woff2" crossorigin>',
        '<link rel="preconnect" href="https://fonts.gstatic.com">',
        '<link rel="icon" href="https://example.org/favicon.ico">',
        '<link href="https://example.org/no-rel.css">',
    ],
)
def test_external_stylesheet_font_or_icon_link_is_flagged(link: str) -> None:
    assert len(check_offline.external_html_resources(page(head=link))) == 1


def test_css_import_and_font_url_are_flagged() -> None:
    css = (
        '@import url("https://fonts.googleapis.com/css2?family=Inter");\n'
        "@import 'http://example.org/other.css';\n"
        "@font-face { font-family: X; src: url(https://example.org/x.woff2) format('woff2'); }\n"
    )
    assert check_offline.external_css_urls(css) == [
        "@import https://fonts.googleapis.com/css2?family=Inter",
        "@import http://example.org/other.css",
        "url(https://example.org/x.woff2)",
    ]
    # the same rules inside a page: a <style> block and a style attribute
    html = page(
        head=f"<style>{css}</style>",
        body='<div style="background: url(//example.org/bg.png)">x</div>',
    )
    assert len(check_offline.external_html_resources(html)) == 4


def test_relative_resources_and_plain_links_are_accepted() -> None:
    html = page(
        head=(
            '<script defer="defer" src="_static/mathjax/tex-chtml.js"></script>'
            '<script src="../_static/doctools.js?v=1"></script>'
            '<link rel="stylesheet" href="../_static/styles/theme.css?digest=abc" />'
            '<link rel="canonical" href="https://cvfl.example.org/results.html" />'
            '<link rel="next prev" href="https://example.org/next.html" />'
            '<style>@import url(_static/basic.css); .a { background: url("data:image/svg+xml;'
            "charset=utf-8,%3Csvg xmlns='http://www.w3.org/2000/svg'%3E\"); }</style>"
        ),
        body=(
            '<a href="https://arxiv.org/abs/1611.07555">Konečný &amp; Richtárik</a>'
            '<a href="http://example.org">plain link</a>'
            '<svg xmlns="http://www.w3.org/2000/svg"><path d="M0 0"/></svg>'
            '<img src="_images/plot.png" alt="a local figure">'
            "<p>text that mentions https://example.org/x.js in prose</p>"
        ),
    )
    assert check_offline.external_html_resources(html) == []
    assert check_offline.external_css_urls("@import url(../basic.css); a{b:url(f.woff)}") == []


def test_external_media_is_flagged() -> None:
    html = page(
        body=(
            '<img src="https://example.org/badge.svg">'
            '<iframe src="https://www.youtube.com/embed/x"></iframe>'
            '<img srcset="a.png 1x, https://example.org/b.png 2x">'
        )
    )
    assert len(check_offline.external_html_resources(html)) == 3


def _build(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_main_lists_offending_files_and_urls(tmp_path: Path, capsys) -> None:
    _build(
        tmp_path,
        {
            "index.html": page(head='<script src="_static/local.js"></script>'),
            "_static/local.js": "",
            "_static/theme.css": "@import url('https://fonts.example.org/a.css');",
            "sub/page.html": page(head='<script src="https://cdn.example.org/m.js"></script>'),
            "sub/gone.html": page(head='<script src="../_static/mathjax/tex-chtml.js"></script>'),
        },
    )
    assert check_offline.main([str(tmp_path)]) == 1
    listed = [line.strip() for line in capsys.readouterr().out.splitlines()[1:]]
    assert sorted(listed) == sorted(
        [
            f"{Path('_static/theme.css')}: @import https://fonts.example.org/a.css",
            f"{Path('sub/gone.html')}: missing local file ../_static/mathjax/tex-chtml.js",
            f"{Path('sub/page.html')}: <script src=https://cdn.example.org/m.js>",
        ]
    )


def test_main_accepts_a_clean_build_and_refuses_an_empty_one(tmp_path: Path) -> None:
    assert check_offline.main([str(tmp_path)]) == 2  # no HTML: nothing was checked
    _build(
        tmp_path,
        {
            "index.html": page(
                head='<link rel="stylesheet" href="_static/a.css">',
                body='<a href="https://example.org">out</a>',
            ),
            "_static/a.css": "body { font-family: sans-serif; }",
        },
    )
    assert check_offline.main([str(tmp_path)]) == 0
    assert check_offline.main([str(tmp_path / "absent")]) == 2


@pytest.mark.parametrize(
    "example",
    sorted((ROOT / "docs" / "examples").glob("plot_*.py")),
    ids=lambda p: p.name,
)
def test_gallery_example_shows_code_before_output(example: Path) -> None:
    # sphinx-gallery puts the output *above* the code when an example is a title block plus a
    # single code block (gen_rst: "notebook-like" means more than two blocks); a `# %%` split
    # restores the reading order code -> output.
    from sphinx_gallery.py_source_parser import split_code_and_text_blocks

    _, blocks = split_code_and_text_blocks(example)
    assert len(blocks) > 2, f"{example.name}: split its code into cells with `# %%`"
