"""README.md's and docs/'s links lead somewhere: every relative link names a file of the repository and,
with a #fragment, a heading in it (GitHub's anchors: lower case, punctuation dropped, spaces to hyphens)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]*)\)")


def anchors(page: Path) -> set[str]:
    """The fragments GitHub makes of a page's headings (fenced code's '#' lines are not headings)."""
    found, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*)", line)):
            found.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return found


def broken_links(page: Path) -> list[str]:
    out = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            out.append(f"{target}: no heading #{fragment} in {path or page.name}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(page):
    assert not broken_links(page), broken_links(page)


def test_a_broken_link_and_a_missing_heading_are_found(tmp_path):
    (tmp_path / "b.md").write_text("# Results files\n```sh\n# not a heading\n```\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#results-files) [gone](c.md) [head](b.md#nope) [code](b.md#not-a-heading) "
                    "[web](https://example.org/x#y) [self](#here)\n## Here\n")
    assert broken_links(page) == ["c.md: no such file", "b.md#nope: no heading #nope in b.md",
                                  "b.md#not-a-heading: no heading #not-a-heading in b.md"]
