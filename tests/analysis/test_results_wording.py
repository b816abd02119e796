"""The results pages say only what their intervals show (docs/analysis.md, "How to read a results page"): no
sentence calls two results equal next to an interval that includes 0, and every page links the section that
says how to read it."""
import re
from pathlib import Path

from tests.conftest import REPO_ROOT

RESULTS = REPO_ROOT / "docs" / "results"
PAGES = sorted(RESULTS.rglob("*.md")) + [REPO_ROOT / "README.md"]
HOW_TO_READ = re.compile(r"\]\(([^)#]*analysis\.md)#how-to-read-a-results-page\)")

EQUAL = re.compile(r"\b(equals?|as good as|as well as|match(es)?|level with|the same as|on par|indistinguishable|"
                   r"no different)\b", re.IGNORECASE)  # fmt: skip
NUMBER = r"\s*([−-]?\d+(?:\.\d+)?)\s*"
INTERVAL = re.compile(rf"\[{NUMBER},{NUMBER}\]")
BLOCK_START = re.compile(r"\s*$|\s*([-*] |\d+\. |\||#|```)")  # a blank line, list item, table row, heading, code


def blocks(text: str):
    """(first line number, the block's lines joined): paragraphs, list items, table rows, headings."""
    block, first = [], 1
    for number, line in enumerate(text.splitlines(), 1):
        if block and BLOCK_START.match(line):
            yield first, " ".join(block)
            block = []
        if not block:
            first = number
        if line.strip():
            block.append(line.strip())
    if block:
        yield first, " ".join(block)


def includes_zero(low: str, high: str) -> bool:
    return float(low.replace("−", "-")) <= 0 <= float(high.replace("−", "-"))


def equal_over_noise(text: str) -> list:
    """(line, sentence) of each sentence that calls results equal next to an interval that includes 0."""
    return [(line, sentence) for line, block in blocks(text) for sentence in re.split(r"(?<=[.!?])\s+", block)
            if EQUAL.search(sentence) and any(includes_zero(*ends) for ends in INTERVAL.findall(sentence))]  # fmt: skip


def test_an_equality_next_to_an_interval_with_0_is_found_with_its_line():
    text = ("# A page\n\nThe sandwich norm beats Pre-LN, −63.7 [−75.9, −51.4]. It is as good as\n"
            "NormFormer: −3.1 [−16.5, 10.3].\n")  # fmt: skip
    assert equal_over_noise(text) == [(3, "It is as good as NormFormer: −3.1 [−16.5, 10.3].")]


def test_an_unresolved_difference_said_plainly_or_an_equality_without_such_an_interval_passes():
    text = ("- 3 seeds do not order the two: −3.1 [−16.5, 10.3].\n"
            "- QK-norm matches the paper, −9.7 [−16.9, −2.6].\n"
            "- The tables match (2113 × 256). Either may be ahead: [−16.5, 10.3].\n")  # fmt: skip
    assert equal_over_noise(text) == []


def test_no_results_page_calls_results_equal_over_an_interval_with_0():
    found = [f"{page.relative_to(REPO_ROOT)}:{line}: {sentence}"
             for page in PAGES for line, sentence in equal_over_noise(page.read_text())]  # fmt: skip
    assert not found, "not resolved is not equal (docs/analysis.md#how-to-read-a-results-page):\n" + "\n".join(found)


def test_every_results_page_links_how_to_read_it():
    assert "\n### How to read a results page\n" in (REPO_ROOT / "docs" / "analysis.md").read_text()
    for page in RESULTS.rglob("README.md"):
        links = HOW_TO_READ.findall(page.read_text())
        assert links, f"{page.relative_to(REPO_ROOT)} does not link analysis.md#how-to-read-a-results-page"
        assert all((page.parent / link).resolve() == REPO_ROOT / "docs" / "analysis.md" for link in links), page
