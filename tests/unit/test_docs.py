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


def fenced(page: Path) -> list[str]:
    """The page's fenced code blocks, each its text."""
    blocks, cur = [], None
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            blocks, cur = (blocks + ["".join(cur)], None) if cur is not None else (blocks, [])
        elif cur is not None:
            cur.append(line + "\n")
    return blocks


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


def test_every_reference_file_the_docs_show_loads_as_pasted(tmp_path):
    """A code block of the docs that begins with --reference's header is a file a user pastes: it loads."""
    from commbench.core.analysis.verdict import load_reference

    blocks = [b for page in PAGES for b in fenced(page) if b.startswith("link,metric,expected,warn_pct,fail_pct\n")]
    assert blocks
    for i, block in enumerate(blocks):
        (tmp_path / f"ref{i}.csv").write_text(block)
        assert len(load_reference(str(tmp_path / f"ref{i}.csv"))) == block.count("\n") - 1
