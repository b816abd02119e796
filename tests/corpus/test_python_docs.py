"""The Python manual corpus: prose kept and reST markup dropped, and a build through the CLI on a
manual-shaped folder of files (the real manual is Debian's python3.X-doc, not installed on every machine)."""
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fairseq.data import Dictionary, data_utils

from fairseq_normformer.corpus.pipeline import read_manifest
from fairseq_normformer.corpus.python_docs import file_document, prose_lines
from fairseq_normformer.corpus.stdlib import docstring_paragraphs, split_of
from tests.conftest import run_cli

BISECT = textwrap.dedent(
    """\
    :mod:`bisect` --- Array bisection algorithm
    ===========================================

    .. module:: bisect
       :synopsis: Array bisection algorithms for binary searching.
    .. sectionauthor:: Fred L. Drake, Jr. <fdrake@acm.org>

    This module provides support for maintaining a list in
    sorted order, see :func:`~bisect.insort` and :ref:`the recipes <bisect-example>`.

    .. function:: bisect_left(a, x, lo=0, hi=len(a), *, key=None)
                  bisect(a, x)

       Locate the insertion point for *x* in **a**; ``list.insert()`` takes it.

       .. versionchanged:: 3.10
          Added the *key* parameter.

    .. note:: The search functions are stateless.

    >>> bisect([1, 2], 2)
    1

    For example::

       >>> bisect([1, 2], 1)
       0
       print("code, not prose")

    .. code-block:: python

       def grade(score):
           return score

    .. This is a comment
       that spans two lines.

    +-------+-------+
    | table | cells |
    +-------+-------+

    The last paragraph ends here.
    """
)


def paragraphs(text: str) -> list:
    """prose_lines joined into paragraphs as file_document joins them."""
    out, lines = [], []
    for line in list(prose_lines(text)) + [None]:
        if line is None:
            out += [" ".join(lines)] if lines else []
            lines = []
        else:
            lines.append(line)
    return out


def test_prose_is_kept_and_markup_dropped():
    assert paragraphs(BISECT) == [
        "bisect --- Array bisection algorithm",
        "This module provides support for maintaining a list in sorted order, see bisect.insort and the recipes.",
        "Locate the insertion point for x in a; list.insert() takes it.",
        "Added the key parameter.",
        "The search functions are stateless.",
        "For example:",
        "The last paragraph ends here.",
    ]


def test_file_document_keeps_paragraphs_of_four_words_or_more(tmp_path):
    path = tmp_path / "bisect.rst.txt"
    path.write_text(BISECT)
    (document,) = file_document("library/bisect", path)
    assert document.module == "library/bisect"
    assert document.paragraphs == [p for p in paragraphs(BISECT) if len(p.split()) >= 4]
    path.write_text(".. toctree::\n   library/index\n")
    assert file_document("contents", path) == []


def manual_like(root, n_files: int) -> dict:
    """``n_files`` reST files in folders as the manual has them, each a function directive over
    paragraphs of real text without markup (standard-library docstrings); {name: its paragraphs}."""
    plain = re.compile(r"^[A-Za-z0-9 ,.;()']+$")
    docstrings = (getattr(module, n).__doc__ for module in (re, subprocess, textwrap) for n in dir(module))
    texts = [p for d in docstrings if d for p in docstring_paragraphs(d) if plain.match(p) and len(p.split()) >= 4]
    expected = {}
    for i in range(n_files):
        name = f"{('library', 'howto', 'reference')[i % 3]}/page{i}"
        expected[name] = [texts[(2 * i) % len(texts)], texts[(2 * i + 1) % len(texts)]]
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        body = "\n\n".join(textwrap.fill(p, 60, initial_indent="   ", subsequent_indent="   ") for p in expected[name])
        (root / f"{name}.rst.txt").write_text(f".. function:: f{i}(x)\n\n{body}\n")
    return expected


@pytest.mark.slow
def test_cli_builds_a_corpus_split_by_file_and_names_a_missing_manual(tmp_path):
    sources = tmp_path / "_sources"
    expected = manual_like(sources, 60)
    out = run_cli(["normformer-build-corpus", "--out", tmp_path / "corpus", "--python-docs", sources,
                   "--vocab-size", "300"]).stdout  # fmt: skip
    assert "built a corpus" in out
    manifest = read_manifest(tmp_path / "corpus")
    assert manifest["settings"]["python_docs"] == str(sources) and manifest["settings"]["stdlib"] is None
    for split in ("train", "valid", "test"):
        names = [n for n in sorted(expected) if split_of(n, 0) == split]
        raw = (tmp_path / "corpus" / "raw" / f"{split}.txt").read_text().splitlines()
        assert raw == [p for n in names for p in expected[n]], split
        assert manifest["stats"][split]["documents"] == len(names) > 0
        dictionary = Dictionary.load(str(tmp_path / "corpus" / "data-bin" / "dict.txt"))
        assert len(data_utils.load_indexed_dataset(str(tmp_path / "corpus" / "data-bin" / split), dictionary)) == len(raw)

    script = Path(sys.executable).parent / "normformer-build-corpus"
    missing = subprocess.run([script, "--out", tmp_path / "none", "--python-docs", tmp_path / "nowhere"],
                             capture_output=True, text=True)  # fmt: skip
    assert missing.returncode != 0 and not (tmp_path / "none").exists()
    assert "nowhere' does not exist: install the Python manual with `apt-get install python3." in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
