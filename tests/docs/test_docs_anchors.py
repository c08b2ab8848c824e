"""/docs as a reader moves through it: every in-page link lands on a heading (the guide's
Markdown links `#checking-the-history-transparency-log`, which once led nowhere: no heading had
an id), and a table of contents after the introduction reaches every section."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from factories import settings

from tms.pages import docs


class _Page(HTMLParser):
    """The ids on the page, its in-page links, and the links inside the table of contents."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.links: list[str] = []
        self.toc_links: list[str] = []
        self.headings: list[tuple[str, str]] = []  # (tag, id) of h2 and h3 outside the toc
        self._in_toc = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.append(str(found["id"]))
        if tag == "nav" and "toc" in (found.get("class") or ""):
            self._in_toc += 1
        href = found.get("href") or ""
        if tag == "a" and href.startswith("#"):
            (self.toc_links if self._in_toc else self.links).append(href[1:])
        if tag in ("h2", "h3") and not self._in_toc:
            self.headings.append((tag, str(found.get("id"))))

    def handle_endtag(self, tag: str) -> None:
        if tag == "nav" and self._in_toc:
            self._in_toc -= 1


def _guide() -> _Page:
    parsed = _Page()
    parsed.feed(docs.html("http://127.0.0.1:9", settings()))
    return parsed


def test_every_in_page_link_of_the_guide_lands_on_an_id() -> None:
    page = _guide()
    assert "checking-the-history-transparency-log" in page.links
    assert page.links, "the guide links within itself"
    assert [link for link in page.links if link not in page.ids] == []
    assert len(page.ids) == len(set(page.ids)), "ids on a page are unique"


def test_the_guide_has_a_table_of_contents_reaching_every_section() -> None:
    page = _guide()
    sections = [anchor for _, anchor in page.headings if anchor != "toc-title"]
    assert page.toc_links == sections  # every h2 and h3, in order
    assert "for-bots-and-agents" in page.toc_links
    assert [link for link in page.toc_links if link not in page.ids] == []


def test_a_heading_id_is_the_one_github_gives_it() -> None:
    assert docs.slug("Checking the history (transparency log)") == (
        "checking-the-history-transparency-log"
    )
    assert docs.slug("Thinking proofs (check_proof)") == "thinking-proofs-check_proof"
    assert docs.slug("4. Submit evidence, claims and links") == "4-submit-evidence-claims-and-links"
    assert re.fullmatch(r"[\w-]+", docs.slug("Local use (stdio, tms-sign)"))
