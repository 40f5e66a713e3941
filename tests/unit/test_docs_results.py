"""The README's Results table against docs/benchmarks.md: every figure it states stands in the section it
links to, beside a command that reproduces it; and every link into the benchmark pages finds its heading."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
HISTORY = ROOT / "docs" / "benchmarks-history.md"
LINK = re.compile(r"\]\((?P<page>[\w./-]*?benchmarks(?:-history)?\.md)#(?P<anchor>[^)\s]+)\)")
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, only letters, marks, digits, '_', '-' and spaces kept,
    spaces made hyphens."""
    text = heading.lstrip("#").strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return kept.replace(" ", "-")


def headings(markdown: str) -> list[tuple[int, int, str]]:
    """(line, level, anchor) of every heading; repeated anchors numbered -1, -2 as GitHub does, and '#'
    lines inside code blocks are not headings."""
    found = []
    seen: dict[str, int] = {}
    fenced = False
    for i, line in enumerate(markdown.split("\n")):
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else re.match(r"^(#{1,6}) \S", line)
        if match:
            anchor = slug(line)
            n = seen.get(anchor, 0)
            seen[anchor] = n + 1
            found.append((i, len(match[1]), anchor if n == 0 else f"{anchor}-{n}"))
    return found


def sections(markdown: str) -> dict[str, str]:
    """Anchor -> the text from that heading to the next heading of the same or a higher level."""
    lines = markdown.split("\n")
    marks = headings(markdown)
    found = {}
    for k, (start, level, anchor) in enumerate(marks):
        stop = next((line for line, lvl, _ in marks[k + 1 :] if lvl <= level), len(lines))
        found[anchor] = "\n".join(lines[start:stop])
    return found


def results_rows(readme: str) -> list[tuple[str, str, str]]:
    """(what, figure, anchor) of each row of the README's Results table (the link's page must be
    docs/benchmarks.md)."""
    part = readme.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in part.split("\n") if line.startswith("| ") and not line.startswith("| what ")]
    out = []
    for row in rows:
        what, figure, where = (cell.strip() for cell in row.strip("|").split(" | "))
        link = LINK.search(where)
        assert link and link["page"] == "docs/benchmarks.md", f"row without a link into the reference: {row}"
        out.append((what, figure, link["anchor"]))
    return out


def missing(figure: str, section: str) -> list[str]:
    """The numbers of a figure cell that the section does not state, and '```bash' when it has no
    command."""
    gaps = [
        number
        for number in NUMBER.findall(figure)
        if not re.search(rf"(?<![\d.,]){re.escape(number)}(?![\d]|[.,]\d)", section)
    ]
    return gaps + ([] if "```bash" in section else ["```bash"])


def test_every_results_figure_stands_beside_its_command_in_the_linked_section() -> None:
    reference = sections(BENCHMARKS.read_text())
    rows = results_rows(README.read_text())
    assert len(rows) >= 7, "accuracy on the real streams, edge cost, gateway throughput, cloud storm"
    for what, figure, anchor in rows:
        assert anchor in reference, f"{what}: no heading of docs/benchmarks.md has the anchor #{anchor}"
        assert NUMBER.search(figure), f"{what}: the figure cell states no figure"
        assert missing(figure, reference[anchor]) == [], f"{what}: #{anchor} lacks these"


def test_the_results_cover_the_real_streams_edge_gateway_and_storm() -> None:
    whats = " ".join(what for what, _, _ in results_rows(README.read_text()))
    for topic in ("ELEC2", "elec2-noprice", "keystroke", "outdoor", "edge cost", "gateway", "storm"):
        assert topic in whats, topic
    quirk = "NSW price above its mean over the previous 48 samples"
    assert quirk in whats, "ELEC2's quirk beside its figures"


def test_the_check_finds_a_figure_or_a_command_the_section_lacks() -> None:
    section = "## 4. Speed\n\n```bash\n.venv/bin/python bench/x.py\n```\n\n| a | 7.58 | 17.6 | 248,314 |\n"
    assert missing("7.58 µs, 248,314 samples/s", section) == []
    assert missing("7.6 µs", section) == ["7.6"], "17.6 must not pass for 7.6"
    assert missing("248,31 samples/s", section) == ["248,31"]
    assert missing("7.58 µs", section.replace("```bash", "```text")) == ["```bash"]


def test_the_readme_starts_with_its_two_commands_and_states_results_after_them() -> None:
    readme = README.read_text()
    first_block = readme.index("```bash\nbash scripts/demo.sh")
    assert readme.index("\n## ") > first_block, "no section before the two commands"
    assert readme.index("\n## Results\n") > first_block


#: The pages that may link into the benchmark pages.
DOCS = [
    "README.md",
    "CHANGELOG.md",
    "CONTRIBUTING.md",
    *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("docs/*.md")),
]


@pytest.mark.parametrize("source", DOCS)
def test_links_into_the_benchmark_pages_find_their_headings(source: str) -> None:
    pages = {page.name: sections(page.read_text()) for page in (BENCHMARKS, HISTORY)}
    for link in LINK.finditer((ROOT / source).read_text()):
        page = Path(link["page"]).name
        assert link["anchor"] in pages[page], f"{source}: {link['page']}#{link['anchor']}"


def contents(markdown: str) -> list[str]:
    """The Contents list a page should have: every level-2 and level-3 heading, linked."""
    lines = markdown.split("\n")
    return [
        f"{'  ' * (level - 2)}- [{lines[i].lstrip('#').strip().replace('`', '')}](#{anchor})"
        for i, level, anchor in headings(markdown)
        if level in (2, 3) and anchor != "contents"
    ]


def test_the_contents_of_both_pages_list_every_section_and_subsection() -> None:
    """A heading added or renamed without its Contents line fails here; the message is the list to paste."""
    for page in (BENCHMARKS, HISTORY):
        text = page.read_text()
        listed = text.split("\n## Contents\n\n", 1)[1].split("\n\n", 1)[0].split("\n")
        expected = contents(text)
        assert listed == expected, f"{page.name}: its Contents should read\n" + "\n".join(expected)
