"""normformer-build-corpus: build a corpus for fairseq from text already on this machine.

    normformer-build-corpus --out DIR [--format lm|bert] [--vocab-size N] [--max-chars N] [--seed S]
    normformer-build-corpus --out DIR --text FILE... | --text-dir DIR [--format lm|bert] [--vocab-size N]
    normformer-build-corpus --out DIR --format translation --source-lang en --target-lang de [--max-words N]
    normformer-build-corpus --out DIR --format squad|squad2|conll|swag [--max-chars N] [--seed S]

lm/bert: the Python standard library's docstrings, with --python-docs the Python manual, with --text/--text-dir
your own plain text (docs/data.md); translation: the gettext message
catalogues of installed programs (docs/translation.md); squad/squad2/conll/swag: fine-tuning tasks built from
the standard library's syntax trees (docs/finetuning.md). lm/bert/translation write DIR/raw (text), DIR/spm.model
(SentencePiece), DIR/data-bin (fairseq-preprocess output). A complete corpus with the same settings
in DIR is reused.
"""
import argparse
from pathlib import Path

from ..corpus.finetune_tasks import FORMATS as TASK_FORMATS
from ..corpus.finetune_tasks import build_finetune_data
from ..corpus.gettext import DEFAULT_LOCALE_DIR, build_translation_corpus
from ..corpus.pipeline import MARKER, SPLITS, read_manifest
from ..corpus.python_docs import DEFAULT_DOCS_DIR, PACKAGE
from ..corpus.stdlib import FORMATS, build_corpus
from ..corpus.text import HELD_OUT_EVERY, build_text_corpus, text_files

TRANSLATION = "translation"


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="normformer-build-corpus", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output directory (absent, empty, or a corpus to reuse)")
    parser.add_argument("--format", choices=(*FORMATS, TRANSLATION, *TASK_FORMATS), default="lm",
                        help="lm: a paragraph a line; bert: a sentence a line, an empty line between documents; "
                        "translation: gettext message pairs; squad, squad2, conll, swag: fine-tuning tasks "
                        "(docs/finetuning.md)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="SentencePiece vocabulary (soft limit)")
    parser.add_argument("--max-chars", type=int, default=None,
                        help="cap the total text (shared 90/5/5 by the splits); default: everything")
    parser.add_argument("--seed", type=int, default=0,
                        help="salts the module-to-split hash (translation: the catalogues' order); seeds SentencePiece")
    parser.add_argument("--workers", type=int, default=1, help="fairseq-preprocess --workers")
    parser.add_argument("--python-docs", nargs="?", const=str(DEFAULT_DOCS_DIR), default=None, metavar="DIR",
                        help=f"lm/bert: the Python manual's prose (7 MB; `apt-get install {PACKAGE}`) instead of "
                        f"the docstrings; DIR: its reST sources (default {DEFAULT_DOCS_DIR})")
    parser.add_argument("--text", nargs="+", default=[], metavar="FILE",
                        help="lm/bert: your own UTF-8 text instead of the docstrings; blank lines separate documents, "
                        f"every {HELD_OUT_EVERY}th document is test and the one before it valid (docs/data.md)")
    parser.add_argument("--text-dir", default=None, metavar="DIR",
                        help="lm/bert: as --text, with every file under DIR (sorted by path)")
    parser.add_argument("--dedup", action="store_true",
                        help="--text/--text-dir: leave out every document that is an exact copy of an earlier one, "
                        "before the split")
    group = parser.add_argument_group("translation")
    group.add_argument("--source-lang", default="en",
                       help="source language: en (the msgids are English) or, for X->en, a directory of --locale-dir")
    group.add_argument("--target-lang", default="de",
                       help="target language: a directory of --locale-dir (de, fr, ...), or en when --source-lang is one")
    group.add_argument("--locale-dir", default=DEFAULT_LOCALE_DIR, help="where <lang>/LC_MESSAGES/*.mo live")
    group.add_argument("--max-words", type=int, default=None,
                       help="drop pairs whose English side has more words; default: keep all")
    return parser  # fmt: skip


def summary(out_dir) -> str:
    """A table of what ``out_dir`` holds: per split the statistics its manifest records (modules,
    documents, lines, characters, pieces; or catalogues, pairs, words and pieces per language)."""
    stats = read_manifest(out_dir)["stats"]
    columns = list(stats["train"])
    rows = [f"{'split':<6}" + "".join(f"{c:>11}" for c in columns)]
    rows += [f"{s:<6}" + "".join(f"{stats[s][c]:>11,}" for c in columns) for s in SPLITS]
    rows.append(f"SentencePiece vocabulary: {stats['spm_vocab_size']:,}; "
                f"fairseq dictionary: {stats['dict_size']:,}")  # fmt: skip
    return "\n".join(rows + text_overlap(stats))


def text_overlap(stats: dict) -> list:
    """--text corpora: the lines on documents of valid and test that are exact copies of train documents."""
    lines = []
    if "duplicates_removed" in stats:
        removed = stats["duplicates_removed"]
        lines.append(f"--dedup left out {removed['documents']:,} exact copies of earlier documents "
                     f"({removed['chars']:,} characters)")  # fmt: skip
    for split, n in stats.get("held_out_in_train", {}).items():
        share = n["chars"] / n["of_chars"] if n["of_chars"] else 0
        lines.append(f"{split} documents also in train (exact copies): {n['documents']:,} of {n['of_documents']:,}, "
                     f"{n['chars']:,} of {n['of_chars']:,} characters ({share:.1%})"
                     + ("; --dedup removes them" if n["documents"] and "duplicates_removed" not in stats else ""))
    return lines


def build_task(args):
    """--format squad|squad2|conll|swag: DIR/{train,valid,test}.json, .conll or SWAG's
    {train,val,test}.csv (docs/finetuning.md)."""
    try:
        counts = build_finetune_data(args.out, args.format, max_chars=args.max_chars, seed=args.seed)
    except (FileExistsError, ValueError) as e:
        raise SystemExit(f"normformer-build-corpus: error: {e}")
    print(f"built {args.format} data in {args.out}: " + "; ".join(f"{s} {c}" for s, c in counts.items()))


def build(args):
    """The corpus ``args`` ask for; (paths, raw file suffixes, fairseq task)."""
    if args.format == TRANSLATION:
        if args.max_chars is not None or args.python_docs is not None:
            raise ValueError("--max-chars and --python-docs apply to the lm and bert formats; "
                             "translation reads the gettext catalogues (--max-words caps them)")
        paths = build_translation_corpus(
            args.out, source_lang=args.source_lang, target_lang=args.target_lang, locale_dir=args.locale_dir,
            vocab_size=args.vocab_size, max_words=args.max_words, seed=args.seed, workers=args.workers,
        )  # fmt: skip
        return paths, f"{{{args.source_lang},{args.target_lang}}}", "translation"
    if args.max_words is not None:
        raise ValueError("--max-words applies to --format translation; use --max-chars for lm and bert")
    if args.text or args.text_dir is not None:
        paths = build_own_text(args)
    else:
        paths = build_corpus(args.out, fmt=args.format, vocab_size=args.vocab_size, max_chars=args.max_chars,
                             seed=args.seed, workers=args.workers, python_docs_dir=args.python_docs)  # fmt: skip
    return paths, "txt", "mlm_nsp --criterion mlm_nsp" if args.format == "bert" else "language_modeling"


def build_own_text(args):
    """--text/--text-dir (lm or bert): the corpus of corpus/text.py."""
    if args.python_docs is not None:
        raise ValueError("--python-docs and --text/--text-dir each name the text: pass one of them")
    return build_text_corpus(args.out, text_files(args.text, args.text_dir), fmt=args.format,
                             vocab_size=args.vocab_size, max_chars=args.max_chars, seed=args.seed,
                             workers=args.workers, dedup=args.dedup)  # fmt: skip


def main(argv=None):
    args = get_parser().parse_args(argv)
    if (args.text or args.text_dir is not None) and args.format not in FORMATS:
        raise SystemExit(f"normformer-build-corpus: error: --text and --text-dir build the {' and '.join(FORMATS)} "
                         f"formats, not {args.format}")
    if args.dedup and not (args.text or args.text_dir is not None):
        raise SystemExit("normformer-build-corpus: error: --dedup applies to your own text (--text, --text-dir)")
    if args.format in TASK_FORMATS:
        return build_task(args)
    reused = (Path(args.out) / MARKER).exists()
    try:
        paths, suffixes, task = build(args)
    except (ValueError, FileExistsError, FileNotFoundError) as e:
        raise SystemExit(f"normformer-build-corpus: error: {e}")
    print(f"{'reused the' if reused else 'built a'} corpus in {paths.raw_dir.parent} ({MARKER} lists the settings)")
    print(f"  raw text:      {paths.raw_dir}/{{train,valid,test}}.{suffixes}")
    print(f"  SentencePiece: {paths.spm_model}")
    print(f"  fairseq data:  {paths.data_bin}   (fairseq-train {paths.data_bin} --task {task} ...)")
    print(summary(paths.raw_dir.parent))


if __name__ == "__main__":
    main()
