"""Every relative link of the top-level pages, docs/ and recipes/ reaches its file, and its #anchor a heading
there, as GitHub renders the pages: a results page moved or a heading renamed would otherwise leave a reader at a
dead link."""
import re
from functools import lru_cache
from pathlib import Path

from tests.conftest import REPO_ROOT

PAGES = sorted([*REPO_ROOT.glob("*.md"), *(REPO_ROOT / "docs").rglob("*.md"), *(REPO_ROOT / "recipes").rglob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^#+\s+(.+?)\s*$", re.MULTILINE)


def slug(heading: str) -> str:
    """GitHub's anchor: lower case, only word characters, spaces and hyphens kept, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(text: str) -> set:
    """Each heading's anchor; a repeated one gets -1, -2... as on GitHub."""
    seen, found = {}, set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        found.add(f"{base}-{seen[base]}" if base in seen else base)
        seen[base] = seen.get(base, 0) + 1
    return found


@lru_cache(maxsize=None)
def page_anchors(page: Path) -> set:
    return anchors(page.read_text(encoding="utf-8"))


def dead_links(page: Path) -> list:
    dead = []
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            dead.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in page_anchors(linked):
            dead.append(f"{target} (no such heading)")
    return dead


def test_anchors_are_githubs():
    text = ("# The bench on a cluster\n## Aggregating: `normformer-analyze sweep OUT`\n"
            "## Sun et al. 2025's \"curse of depth\"\n## Setup\n```\n# not a heading\n```\n## Setup\n")  # fmt: skip
    assert anchors(text) == {"the-bench-on-a-cluster", "aggregating-normformer-analyze-sweep-out",
                             "sun-et-al-2025s-curse-of-depth", "setup", "setup-1"}  # fmt: skip


def test_a_dead_file_or_anchor_is_named(tmp_path):
    (tmp_path / "b.md").write_text("# Where results land\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#where-results-land), [file](c.md), [anchor](b.md#results), [web](https://x.org/#y)\n")
    assert dead_links(page) == ["c.md (no such file)", "b.md#results (no such heading)"]


def test_every_documentation_link_resolves():
    assert len(PAGES) > 50
    dead = [f"{page.relative_to(REPO_ROOT)}: {link}" for page in PAGES for link in dead_links(page)]
    assert not dead, "dead links:\n" + "\n".join(dead)
