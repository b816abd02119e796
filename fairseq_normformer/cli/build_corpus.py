"""normformer-build-corpus: build the Python-standard-library docstring corpus for fairseq.

    normformer-build-corpus --out DIR [--format lm|bert] [--vocab-size N] [--max-chars N] [--seed S]

Writes DIR/raw (text), DIR/spm.model (SentencePiece), DIR/data-bin (fairseq-preprocess output);
see docs/data.md. A complete corpus with the same settings in DIR is reused.
"""
import argparse
from pathlib import Path

from ..corpus.finetune_tasks import FORMATS as TASK_FORMATS
from ..corpus.finetune_tasks import build_finetune_data
from ..corpus.stdlib import FORMATS, MARKER, SPLITS, build_corpus, read_manifest


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="normformer-build-corpus", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output directory (absent, empty, or a corpus to reuse)")
    parser.add_argument("--format", choices=FORMATS + TASK_FORMATS, default="lm",
                        help="lm: a paragraph a line; bert: a sentence a line, an empty line between documents; "
                        "squad, squad2, conll, swag: fine-tuning tasks (docs/finetuning.md)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="SentencePiece vocabulary (soft limit)")
    parser.add_argument("--max-chars", type=int, default=None,
                        help="cap the total text (shared 90/5/5 by the splits); default: everything")
    parser.add_argument("--seed", type=int, default=0,
                        help="salts the module-to-split hash; seeds SentencePiece")
    parser.add_argument("--workers", type=int, default=1, help="fairseq-preprocess --workers")
    return parser  # fmt: skip


def summary(out_dir) -> str:
    """A table of what ``out_dir`` holds: per split modules, documents, lines, characters, pieces."""
    stats = read_manifest(out_dir)["stats"]
    columns = ("modules", "documents", "lines", "chars", "pieces")
    rows = [f"{'split':<6}" + "".join(f"{c:>11}" for c in columns)]
    rows += [f"{s:<6}" + "".join(f"{stats[s][c]:>11,}" for c in columns) for s in SPLITS]
    rows.append(f"SentencePiece vocabulary: {stats['spm_vocab_size']:,}; "
                f"fairseq dictionary: {stats['dict_size']:,}")  # fmt: skip
    return "\n".join(rows)


def build_task(args):
    """--format squad|squad2|conll|swag: DIR/{train,valid,test}.json, .conll or SWAG's
    {train,val,test}.csv (docs/finetuning.md)."""
    try:
        counts = build_finetune_data(args.out, args.format, max_chars=args.max_chars, seed=args.seed)
    except (FileExistsError, ValueError) as e:
        raise SystemExit(f"normformer-build-corpus: error: {e}")
    print(f"built {args.format} data in {args.out}: " + "; ".join(f"{s} {c}" for s, c in counts.items()))


def main(argv=None):
    args = get_parser().parse_args(argv)
    if args.format in TASK_FORMATS:
        return build_task(args)
    reused = (Path(args.out) / MARKER).exists()
    try:
        paths = build_corpus(args.out, fmt=args.format, vocab_size=args.vocab_size, max_chars=args.max_chars,
                             seed=args.seed, workers=args.workers)  # fmt: skip
    except (ValueError, FileExistsError) as e:
        raise SystemExit(f"normformer-build-corpus: error: {e}")
    print(f"{'reused the' if reused else 'built a'} corpus in {paths.raw_dir.parent} ({MARKER} lists the settings)")
    print(f"  raw text:      {paths.raw_dir}/{{train,valid,test}}.txt")
    print(f"  SentencePiece: {paths.spm_model}")
    print(f"  fairseq data:  {paths.data_bin}   (fairseq-train {paths.data_bin} --task language_modeling ...)")
    print(summary(paths.raw_dir.parent))


if __name__ == "__main__":
    main()
