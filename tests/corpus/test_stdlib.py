"""The standard-library docstring corpus: text extraction, splits, formats, SentencePiece, binarization."""
import ast
import collections
import json
import logging
import re
import sys
import sysconfig
import textwrap

import pytest
import sentencepiece as spm
from fairseq.data import Dictionary, data_utils

from fairseq_normformer.corpus import stdlib as stdlib_corpus
from fairseq_normformer.corpus.stdlib import (
    SPLITS,
    build_corpus,
    docstring_paragraphs,
    node_documents,
    sentences,
    split_documents,
    split_of,
    stdlib_modules,
)
from fairseq_normformer.corpus.pipeline import read_manifest
from tests.conftest import TINY_MAX_CHARS, run_cli

STDLIB = sysconfig.get_paths()["stdlib"]


def lines_of(path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]  # every line ends with \n


def test_docstring_paragraphs_drop_doctests_and_rules_and_collapse_whitespace():
    doc = textwrap.dedent(
        """\
        Return the   thing.

        Section
        -------
        A second
            paragraph,   wrapped.

        >>> thing(1)
        2
        ... more output

        ======
        After the example.
        """
    )
    expected = ["Return the thing.", "Section A second paragraph, wrapped.", "After the example."]
    assert docstring_paragraphs(doc) == expected


def test_documents_are_modules_and_classes_with_their_functions():
    source = textwrap.dedent(
        '''\
        """Module doc."""
        def f():
            """Function f."""
        class A:
            """Class A."""
            def m(self):
                """Method m."""
            class B:
                """Nested B."""
        if True:
            class C:
                """Conditional C."""
        try:
            def g():
                """Function g."""
        except ImportError:
            pass
        '''
    )
    docs = node_documents(ast.parse(source), "mod")
    assert [d.paragraphs for d in docs] == [
        ["Module doc.", "Function f.", "Function g."],
        ["Class A.", "Method m."],
        ["Nested B."],
        ["Conditional C."],
    ]
    assert {d.module for d in docs} == {"mod"}


def test_sentences():
    assert sentences("One thing. Two, e.g. this one. (Three) is here? 4 ends! x.y stays.") == [
        "One thing.",
        "Two, e.g. this one.",
        "(Three) is here?",
        "4 ends! x.y stays.",
    ]


def test_modules_skip_test_suites_and_split_disjointly():
    modules = stdlib_modules(STDLIB)
    names = [name for name, _ in modules]
    assert names == sorted(names) and len(names) == len(set(names))
    assert "json.decoder" in names and "os" in names
    assert not [n for n in names if n.split(".")[0] in ("test", "idlelib", "lib2to3", "site-packages")]
    counts = collections.Counter(split_of(n, seed=0) for n in names)
    assert 0.8 < counts["train"] / len(names) < 0.97 and counts["valid"] > 0 and counts["test"] > 0
    assert [split_of(n, seed=0) for n in names] == [split_of(n, seed=0) for n in names]
    assert [split_of(n, seed=0) for n in names] != [split_of(n, seed=1) for n in names]

    documents = split_documents(STDLIB, seed=0, max_chars=100_000)
    modules_of = {s: {d.module for d in documents[s]} for s in SPLITS}
    assert not (modules_of["train"] & modules_of["valid"] or modules_of["train"] & modules_of["test"])
    assert not modules_of["valid"] & modules_of["test"]
    assert all(split_of(m, seed=0) == s for s in SPLITS for m in modules_of[s])


def test_lm_corpus_files_and_manifest(tiny_lm_corpus):
    stats = read_manifest(tiny_lm_corpus.raw_dir.parent)["stats"]
    total = 0
    for split in SPLITS:
        lines = lines_of(tiny_lm_corpus.raw_dir / f"{split}.txt")
        assert lines and all(lines), f"{split}: one non-empty paragraph a line"
        assert not [line for line in lines if line.startswith(">>>") or "  " in line or line != line.strip()]
        assert stats[split]["lines"] == len(lines) and stats[split]["chars"] == sum(map(len, lines))
        total += stats[split]["chars"]
    assert stats["train"]["chars"] <= TINY_MAX_CHARS * 0.9 and total <= TINY_MAX_CHARS
    assert stats["train"]["chars"] > TINY_MAX_CHARS * 0.85  # the cap, not the stdlib, limits it


def test_sentencepiece_from_train_split_and_fairseq_dictionary(tiny_lm_corpus):
    sp = spm.SentencePieceProcessor(model_file=str(tiny_lm_corpus.spm_model))
    pieces_dir = tiny_lm_corpus.raw_dir.parent / "pieces"
    for split in SPLITS:
        raw, pieces = lines_of(tiny_lm_corpus.raw_dir / f"{split}.txt"), lines_of(pieces_dir / f"{split}.txt")
        assert len(raw) == len(pieces)
        ascii_pairs = [(r, p) for r, p in zip(raw, pieces) if r.isascii()]
        assert ascii_pairs and all(sp.decode(p.split()) == r for r, p in ascii_pairs)

    # fairseq-preprocess built the dictionary from the train pieces alone, most frequent first
    train_counts = collections.Counter(p for line in lines_of(pieces_dir / "train.txt") for p in line.split())
    dictionary = Dictionary.load(str(tiny_lm_corpus.data_bin / "dict.txt"))
    symbols = [s for s in dictionary.symbols[dictionary.nspecial :] if not s.startswith("madeupword")]
    assert set(symbols) == set(train_counts)
    assert [dictionary.count[dictionary.index(s)] for s in symbols] == [train_counts[s] for s in symbols]

    # the binarized valid split holds the valid pieces line by line, each line ended by </s>
    valid = data_utils.load_indexed_dataset(str(tiny_lm_corpus.data_bin / "valid"), dictionary)
    valid_lines = lines_of(pieces_dir / "valid.txt")
    assert len(valid) == len(valid_lines)
    unk = dictionary.unk()
    for item, line in zip(valid, valid_lines):
        expected = [dictionary.index(p) for p in line.split()] + [dictionary.eos()]
        assert item.tolist() == expected or unk in expected


def test_bert_format_keeps_document_separators(tiny_bert_corpus, tiny_lm_corpus):
    raw = lines_of(tiny_bert_corpus.raw_dir / "train.txt")
    stats = read_manifest(tiny_bert_corpus.raw_dir.parent)["stats"]["train"]
    assert raw[0] and raw[-1] and raw.count("") == stats["documents"] - 1
    # the same text as the LM format, re-wrapped: sentences of paragraphs
    lm_text = " ".join(lines_of(tiny_lm_corpus.raw_dir / "train.txt"))
    assert " ".join(line for line in raw if line) == lm_text

    dictionary = Dictionary.load(str(tiny_bert_corpus.data_bin / "dict.txt"))
    train = data_utils.load_indexed_dataset(str(tiny_bert_corpus.data_bin / "train"), dictionary)
    assert len(train) == len(raw)
    separators = [i for i, item in enumerate(train) if item.tolist() == [dictionary.eos()]]
    assert separators == [i for i, line in enumerate(raw) if not line]


def test_rebuild_reuses_or_refuses(tiny_lm_corpus, tmp_path):
    out = tiny_lm_corpus.raw_dir.parent
    marker_mtime = (out / "corpus.json").stat().st_mtime_ns
    again = build_corpus(out, fmt="lm", vocab_size=1000, max_chars=TINY_MAX_CHARS)
    assert again == tiny_lm_corpus and (out / "corpus.json").stat().st_mtime_ns == marker_mtime
    with pytest.raises(FileExistsError, match="vocab_size: 1000 there, 900 asked"):
        build_corpus(out, fmt="lm", vocab_size=900, max_chars=TINY_MAX_CHARS)

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="holds no complete corpus"):
        build_corpus(foreign, max_chars=20_000, vocab_size=200)
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]


def test_failed_build_leaves_nothing_behind(tmp_path, monkeypatch):
    def broken(*args):
        raise RuntimeError("preprocess broke")

    monkeypatch.setattr(stdlib_corpus, "fairseq_preprocess", broken)
    with pytest.raises(RuntimeError, match="preprocess broke"):
        build_corpus(tmp_path / "out", max_chars=20_000, vocab_size=200)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_binarized_as_fairseq_preprocess_does_and_the_callers_logging_unchanged(tmp_path, monkeypatch):
    """fairseq-preprocess runs in the builder's process: the same files as the console script writes from the same
    pieces, its log (at INFO) in data-bin/preprocess.log alone, and the caller's logging as it was, in a process that
    configured none (fairseq_cli.preprocess, imported anew, calls logging.basicConfig) with no handler left."""
    root, preprocess_log = logging.getLogger(), logging.getLogger("fairseq_cli.preprocess")
    monkeypatch.delitem(sys.modules, "fairseq_cli.preprocess", raising=False)
    ours, level, handlers = root.handlers[:], root.level, preprocess_log.handlers[:]
    root.handlers.clear()  # in place: pytest's capture handler is set back below
    try:
        paths = build_corpus(tmp_path / "built", max_chars=20_000, vocab_size=200)
        assert (root.handlers, root.level, preprocess_log.handlers) == ([], level, handlers)
    finally:
        root.handlers[:] = ours
    pieces = tmp_path / "built" / "pieces"
    run_cli(["fairseq-preprocess", "--only-source", "--destdir", tmp_path / "cli", "--workers", "1", "--dataset-impl",
             "mmap", *(arg for split in SPLITS for arg in (f"--{split}pref", pieces / f"{split}.txt"))], process=True)
    for name in ("dict.txt", *(f"{split}.{ext}" for split in SPLITS for ext in ("bin", "idx"))):
        assert (paths.data_bin / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    logged = (paths.data_bin / "preprocess.log").read_text()
    assert re.search(r"^\[None\] Dictionary: \d+ types$", logged, re.M) and "| INFO |" not in logged


@pytest.mark.parametrize("kwargs, message", [
    ({"fmt": "xml"}, "format 'xml' is not one of lm, bert"),
    ({"max_chars": 10}, "max_chars must be at least 1000"),
    ({"vocab_size": 0}, "vocab_size must be at least 8"),
])  # fmt: skip
def test_bad_arguments(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_corpus(tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_cli_is_deterministic_reports_what_it_wrote_and_names_errors(tmp_path):
    api = build_corpus(tmp_path / "api", fmt="bert", vocab_size=200, max_chars=20_000, seed=3)
    out = run_cli(["normformer-build-corpus", "--out", tmp_path / "cli", "--format", "bert",
                   "--vocab-size", "200", "--max-chars", "20000", "--seed", "3"]).stdout  # fmt: skip
    stats = json.loads((tmp_path / "cli" / "corpus.json").read_text())["stats"]
    assert "built a corpus" in out and f"{stats['train']['chars']:,}" in out
    assert f"fairseq dictionary: {stats['dict_size']:,}" in out
    assert "--task mlm_nsp --criterion mlm_nsp ..." in out  # BERT's format is read by mlm_nsp, not language_modeling
    for name in ("raw/train.txt", "raw/valid.txt", "raw/test.txt", "spm.vocab", "data-bin/dict.txt",
                 "data-bin/train.bin", "data-bin/valid.idx"):  # spm.model also records its input path
        assert (api.raw_dir.parent / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name

    with pytest.raises(AssertionError, match="built with other settings .*vocab_size: 200 there, 300 asked"):
        run_cli(["normformer-build-corpus", "--out", tmp_path / "cli", "--format", "bert", "--vocab-size", "300",
                 "--max-chars", "20000", "--seed", "3"])  # fmt: skip

