"""normformer-zero-shot: zero-shot multiple-choice accuracy of fairseq checkpoints (the paper's Table 1).

  normformer-zero-shot score --checkpoint CKPT --spm-model SPM [--hellaswag F] [--piqa F] ...
                             [--output results.json]
  normformer-zero-shot table results1.json results2.json ... [--output table1.md]
  normformer-zero-shot make-stdlib-tasks --raw TEXT --out-dir DIR   (small task files from real text)
  normformer-zero-shot lm-eval --model normformer --model_args checkpoint=...,spm_model=... --tasks ...

See docs/zero_shot.md for the accepted file formats, prompts and normalizations.
"""
import argparse
import json
import logging
import sys
from pathlib import Path

from ..zeroshot.evaluate import NORMALIZATIONS, evaluate_tasks, load_files
from ..zeroshot.scorer import PACKAGE_DIR, load_scorer
from ..zeroshot.stdlib_tasks import build_stdlib_tasks
from ..zeroshot.table import markdown_table
from ..zeroshot.tasks import TASKS


def normalization_override(text: str):
    task, _, kind = text.partition("=")
    if task not in TASKS or kind not in NORMALIZATIONS:
        raise argparse.ArgumentTypeError(
            f"expected TASK=KIND with TASK in {', '.join(TASKS)} and KIND in {', '.join(NORMALIZATIONS)}, got {text!r}"
        )
    return task, kind


def add_score_parser(subparsers):
    p = subparsers.add_parser("score", help="accuracy of one checkpoint on local task files")
    p.add_argument("--checkpoint", required=True, help="fairseq checkpoint (.pt)")
    p.add_argument("--spm-model", required=True, help="the SentencePiece model the training data was encoded with")
    p.add_argument("--data", help="directory with the checkpoint's dict.txt (default: the path stored in it)")
    p.add_argument("--user-dir", help="fairseq --user-dir with the model's code (default: this plugin)")
    p.add_argument("--name", help="model name in the results and the table (default: the checkpoint's folder)")
    for name in TASKS:
        p.add_argument(f"--{name}", metavar="FILE", help=f"{name} file in its public format")
    p.add_argument("--piqa-labels", metavar="FILE", help="PIQA labels (default: <piqa file stem>-labels.lst)")
    p.add_argument("--normalization", type=normalization_override, action="append", default=[], metavar="TASK=KIND",
                   help=f"override GPT-3's normalization of a task; KIND in {', '.join(NORMALIZATIONS)}")
    p.add_argument("--limit", type=int, help="score only the first N examples of each file")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda")
    p.add_argument("--fp16", action="store_true", help="half-precision model (GPU)")
    p.add_argument("--max-tokens", type=int, default=4096, help="tokens per scoring batch")
    p.add_argument("--output", help="write the results here as JSON (input of the 'table' command)")


def score(args):
    files = {name: (getattr(args, name), args.piqa_labels if name == "piqa" else None)
             for name in TASKS if getattr(args, name)}  # fmt: skip
    if not files:
        sys.exit(f"error: give at least one task file ({', '.join('--' + t for t in TASKS)})")
    examples = load_files(files, args.limit)  # bad files fail before the model loads
    scorer = load_scorer(args.checkpoint, args.spm_model, args.data, args.user_dir or PACKAGE_DIR,
                         args.device, args.fp16, args.max_tokens)  # fmt: skip
    tasks = evaluate_tasks(scorer, examples, dict(args.normalization))
    for name, (path, _) in files.items():
        tasks[name]["file"] = str(path)
    name = args.name or Path(args.checkpoint).resolve().parent.name
    results = {"model": dict(scorer.info, name=name), "tasks": tasks}
    for task, entry in tasks.items():
        others = " ".join(f"{k} {v:.2f}" for k, v in entry["accuracy_by_normalization"].items())
        print(f"{task:<11} {entry['column']}  {entry['examples']} examples  acc {entry['accuracy']:.2f} "
              f"({entry['normalization']})  | {others} | chance {entry['chance']:.2f}")  # fmt: skip
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2) + "\n")
        print(f"results written to {args.output}")


def table(args):
    results = []
    for path in args.results:
        try:
            results.append(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as err:
            sys.exit(f"error: cannot read results {path}: {err}")
    try:
        text = markdown_table(results)
    except ValueError as err:  # no results, or models with different numbers of seeds
        sys.exit(f"error: {err}")
    print(text, end="")
    if args.output:
        Path(args.output).write_text(text)


def make_stdlib_tasks(args):
    for name, path in build_stdlib_tasks(args.raw, args.out_dir, args.examples, args.seed).items():
        print(f"{name}: {path}")


def run_lm_eval(argv):
    """lm_eval's own command line, with the ``normformer`` model registered."""
    from lm_eval.__main__ import cli_evaluate

    from ..zeroshot import lm_eval_adapter  # noqa: F401  (registers the model)

    sys.argv = ["lm-eval", *argv]
    cli_evaluate()


def build_parser():
    parser = argparse.ArgumentParser(prog="normformer-zero-shot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_score_parser(subparsers)
    p = subparsers.add_parser("table", help="the paper's Table 1 (markdown) from results JSON files")
    p.add_argument("results", nargs="+", help="JSON files written by 'score --output'")
    p.add_argument("--output", help="also write the table to this file")
    p = subparsers.add_parser("make-stdlib-tasks", help="small files in the five formats, made from real text")
    p.add_argument("--raw", required=True, help="text file, one paragraph a line (e.g. a corpus' raw/test.txt)")
    p.add_argument("--out-dir", required=True, help="where the five tasks' files go")
    p.add_argument("--examples", type=int, default=50, help="examples per task")
    p.add_argument("--seed", type=int, default=0, help="seeds the random choice of examples")
    subparsers.add_parser("lm-eval", help="lm_eval's command line with --model normformer available")
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["lm-eval"]:
        return run_lm_eval(argv[1:])
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO)
    args = build_parser().parse_args(argv)
    command = {"score": score, "table": table, "make-stdlib-tasks": make_stdlib_tasks}[args.command]
    try:
        command(args)
    except (OSError, ValueError) as err:  # missing files, bad formats, mismatched models: say which
        sys.exit(f"error: {err}")


if __name__ == "__main__":
    main()
