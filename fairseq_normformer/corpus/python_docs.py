"""A larger real-text corpus: the Python manual's reStructuredText sources, from Debian's package
``python3.X-doc`` (``apt-get install python3.11-doc``; nothing is downloaded at run time).

Each ``.rst.txt`` file under ``/usr/share/doc/python3.X/html/_sources`` is one document. Its prose
paragraphs are kept and its markup dropped: directives' own lines and options, literal and code
blocks, doctest lines, tables and section rules; inline roles keep their text (``:func:`len``` →
``len``). stdlib.py splits the documents by name and builds the corpus as it does for docstrings.
"""
import re
import sys
from pathlib import Path

from .stdlib import RST_RULE, Document

PACKAGE = f"python{sys.version_info.major}.{sys.version_info.minor}-doc"
DEFAULT_DOCS_DIR = Path(f"/usr/share/doc/python{sys.version_info.major}.{sys.version_info.minor}/html/_sources")
SKIPPED = ("whatsnew/changelog",)  # the change log: issue numbers and bullet fragments, not prose
DIRECTIVE = re.compile(r"^\.\.(\s|$)")  # '.. function:: f(x)', '.. note::', '.. comment', '..'
OPTION = re.compile(r"^:[\w-]+:(\s|$)")  # ':synopsis: ...' under a directive
CODE_DIRECTIVES = ("code-block", "sourcecode", "code", "doctest", "testcode", "testoutput", "productionlist",
                   "literalinclude", "highlight", "toctree", "index", "raw", "csv-table", "list-table", "table")
ROLE = re.compile(r":[\w:-]+:`([^`<]*?)(?:\s*<[^`]*>)?`")  # :func:`len`, :ref:`text <label>`
INLINE = re.compile(r"``(.+?)``|\*\*(.+?)\*\*|\*(\S.*?)\*|`([^`]+?)`_{0,2}")
TABLE_ROW = re.compile(r"^[|+]")
# Directives whose argument is a signature that may go on over more lines ('bisect(a, x)' under 'bisect_left').
SIGNATURES = ("function", "method", "class", "data", "attribute", "exception", "decorator", "decoratormethod",
              "classmethod", "staticmethod", "opcode", "cmdoption", "option", "envvar", "describe", "module",
              "currentmodule", "c:function", "c:macro", "c:type", "c:member", "c:var", "pdbcommand")
ADMONITIONS = ("note", "warning", "important", "tip", "seealso", "impl-detail", "caution", "attention")


def doc_files(docs_dir) -> list:
    """(name, path) of every reST source of the manual, sorted by name ('library/bisect', ...)."""
    root = Path(docs_dir)
    if not root.is_dir():
        raise FileNotFoundError(
            f"'{root}' does not exist: install the Python manual with `apt-get install {PACKAGE}`, "
            "or name the folder of its reST sources (html/_sources) with --python-docs DIR"
        )
    files = [(str(p.relative_to(root)).removesuffix(".rst.txt"), p) for p in root.rglob("*.rst.txt")]
    return sorted((name, path) for name, path in files if name not in SKIPPED)


def plain_text(line: str) -> str:
    """A line of prose without inline markup: roles, literals, emphasis and links keep their text."""
    line = ROLE.sub(lambda m: m.group(1).lstrip("~!"), line)
    return INLINE.sub(lambda m: next(g for g in m.groups() if g is not None), line)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def prose_lines(text: str):
    """The lines of ``text`` that are prose, a blank line (None) wherever a paragraph ends."""
    skip_deeper_than = None  # inside a literal block or code directive: skip what is indented more
    directive = None  # the directive whose arguments and options may follow, up to the first blank line
    in_doctest = False  # a '>>>' line and its output, up to the next blank line
    for raw in text.splitlines():
        line = raw.strip()
        if skip_deeper_than is not None and (not line or _indent(raw) > skip_deeper_than):
            continue
        skip_deeper_than = None
        in_doctest = bool(line) and (in_doctest or line.startswith(">>>"))
        if not line or in_doctest or RST_RULE.match(line) or TABLE_ROW.match(line):
            directive = None
            yield None
        elif DIRECTIVE.match(line):
            directive, _, argument = (part.strip() for part in line[3:].partition("::"))
            if not _ or directive in CODE_DIRECTIVES:
                skip_deeper_than = _indent(raw)  # a comment or code: its indented body goes too
            yield None
            if directive in ADMONITIONS and argument:
                yield plain_text(argument)
        elif directive is not None and (OPTION.match(line) or directive in SIGNATURES):
            continue
        else:
            directive = None
            if line.endswith("::"):  # 'Example::' ends a paragraph and starts a literal block
                skip_deeper_than = _indent(raw)
                line = line[:-2].rstrip() + (":" if line[:-2].rstrip() else "")
            if line:
                yield plain_text(line)


def file_document(name: str, path: Path) -> list:
    """[Document] of one source file (empty when it holds no prose)."""
    paragraphs, lines = [], []
    for line in list(prose_lines(path.read_text(encoding="utf-8", errors="replace"))) + [None]:
        if line is None:
            paragraph = " ".join(" ".join(lines).split())
            if len(paragraph.split()) >= 4 and any(c.isalpha() for c in paragraph):
                paragraphs.append(paragraph)
            lines = []
        else:
            lines.append(line)
    return [Document(name, paragraphs)] if paragraphs else []
