"""Check that built HTML docs load nothing from the network.

Every ``.html`` and ``.css`` file under the build directory is scanned for resources fetched from
another site: ``<script src>``, ``<link href>`` (stylesheets, fonts, icons, preloads), embedded
media (``<img>``, ``<iframe>``, ...), and CSS ``@import`` or ``url(...)`` in style sheets,
``<style>`` blocks and ``style`` attributes. A URL is external when it has a network scheme
(``http:``, ``https:``, ``ftp:``) or is protocol-relative (``//host/...``). Plain hyperlinks
(``<a href="https://...">``) are allowed: following one needs the network, reading the page does
not. Local scripts and stylesheets must exist in the build directory (MathJax, for one, is
copied in by an extension only when the build finishes).

Usage::

    python docs/check_offline.py docs/_build/html

Exit status 0 when nothing external is loaded, 1 listing every offending file and URL, 2 when the
directory holds no HTML (nothing was checked).
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

#: ``<link rel=...>`` values that only name a related page; any other rel may load a resource.
NAVIGATION_RELS = frozenset(
    {"alternate", "author", "canonical", "help", "index", "license", "next", "prev", "search"}
)
#: Elements whose ``src`` (or ``data`` for ``<object>``) attribute the browser fetches.
MEDIA_SOURCE_ATTRS = {
    "script": "src",
    "img": "src",
    "iframe": "src",
    "embed": "src",
    "source": "src",
    "audio": "src",
    "video": "src",
    "track": "src",
    "object": "data",
}

_EXTERNAL = re.compile(r"^\s*(?:(?:https?|ftp):|//)", re.IGNORECASE)
_CSS_IMPORT = re.compile(
    r"""@import\s+(?:url\(\s*)?["']?\s*((?:(?:https?|ftp):|//)[^"')\s;]*)""", re.IGNORECASE
)
_CSS_URL = re.compile(r"""url\(\s*["']?\s*((?:(?:https?|ftp):|//)[^"')\s]*)""", re.IGNORECASE)


def is_external(url: str) -> bool:
    """Return whether ``url`` is fetched from another host (network scheme or ``//host``)."""
    return bool(_EXTERNAL.match(url))


def external_css_urls(css: str) -> list[str]:
    """Return the external URLs that CSS text imports or loads (``@import``, ``url()``)."""
    found = [f"@import {m.group(1)}" for m in _CSS_IMPORT.finditer(css)]
    imported = {m.group(1) for m in _CSS_IMPORT.finditer(css)}
    found += [
        f"url({u})" for u in (m.group(1) for m in _CSS_URL.finditer(css)) if u not in imported
    ]
    return found


class _ResourceScanner(HTMLParser):
    """Collect the external resources that an HTML page loads."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self.local: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name.lower(): (value or "") for name, value in attrs}
        if tag == "link":
            href = values.get("href", "")
            rels = set(values.get("rel", "").lower().split())
            if is_external(href) and not (rels and rels <= NAVIGATION_RELS):
                self.found.append(f"<link rel={values.get('rel', '')!r} href={href}>")
            elif "stylesheet" in rels and href:
                self.local.append(href)
        attr = MEDIA_SOURCE_ATTRS.get(tag)
        if attr is not None and is_external(values.get(attr, "")):
            self.found.append(f"<{tag} {attr}={values[attr]}>")
        elif tag == "script" and values.get("src"):
            self.local.append(values["src"])
        if tag in ("img", "source") and any(
            is_external(part.strip()) for part in values.get("srcset", "").split(",") if part
        ):
            self.found.append(f"<{tag} srcset={values['srcset']}>")
        if "style" in values:
            self.found.extend(external_css_urls(values["style"]))
        if tag == "style":
            self._in_style = True

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag == "style":
            self._in_style = False

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.found.extend(external_css_urls(data))


def _scan(html: str) -> _ResourceScanner:
    scanner = _ResourceScanner()
    scanner.feed(html)
    scanner.close()
    return scanner


def external_html_resources(html: str) -> list[str]:
    """Return a description of every external resource that an HTML page loads."""
    return _scan(html).found


def missing_local_resources(html: str, page: Path) -> list[str]:
    """Return the local scripts and stylesheets of ``page`` that do not exist on disk."""
    return _missing(_scan(html).local, page)


def _missing(refs: list[str], page: Path) -> list[str]:
    missing = []
    for ref in refs:
        target = ref.split("#", 1)[0].split("?", 1)[0]
        if not target or target.startswith(("data:", "blob:")) or "{{" in target:
            continue  # inline data, or a theme's Jinja template copied into _static
        if not (page.parent / target).is_file():
            missing.append(f"missing local file {ref}")
    return missing


def check_tree(root: Path) -> tuple[int, dict[Path, list[str]]]:
    """Scan every ``.html`` and ``.css`` file under ``root``.

    Returns
    -------
    n_html : int
        Number of HTML files scanned.
    offenders : dict
        Each file (relative to ``root``) that loads something external or a local script or
        stylesheet that is absent, with what it loads.
    """
    offenders: dict[Path, list[str]] = {}
    n_html = 0
    for path in sorted(root.rglob("*")):
        suffix = path.suffix.lower()
        if suffix not in (".html", ".htm", ".css") or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if suffix == ".css":
            found = external_css_urls(text)
        else:
            n_html += 1
            scanner = _scan(text)
            found = scanner.found + _missing(scanner.local, path)
        if found:
            offenders[path.relative_to(root)] = found
    return n_html, offenders


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python docs/check_offline.py BUILD_DIR", file=sys.stderr)
        return 2
    root = Path(args[0])
    if not root.is_dir():
        print(f"check_offline: {root} is not a directory", file=sys.stderr)
        return 2
    n_html, offenders = check_tree(root)
    if n_html == 0:
        print(f"check_offline: no HTML files under {root}: nothing was checked", file=sys.stderr)
        return 2
    if offenders:
        print(
            f"check_offline: {len(offenders)} file(s) under {root} load external or missing resources:"
        )
        for path, found in offenders.items():
            for item in found:
                print(f"  {path}: {item}")
        return 1
    print(f"check_offline: {n_html} HTML files under {root} load no external scripts or styles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
