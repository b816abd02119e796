"""python -m benchmarks {measure,lambert,hf-generate,paper-125m,norm-schemes,render}: see benchmarks/__init__.py
and docs/benchmarks.md."""
import argparse
import json
import os
import sys
from pathlib import Path

import torch

from fairseq_normformer.corpus.stdlib import build_corpus

from . import __doc__ as DOC
from .eval_lm import REPO_ROOT, eval_lm_throughput
from .measure import measure, measure_lambert, run_description
from .report import render
from .variants import SETUPS, SMALL, variants_for

RESULTS_DIR = REPO_ROOT / "docs" / "results" / "benchmarks"
DOC_PATH = REPO_ROOT / "docs" / "benchmarks.md"


def measure_command(args, argv: list):
    """Measure on ``args.device``, write DEVICE.json, then render the doc."""
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("benchmarks: --device cuda: no CUDA device here")
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    setup = SETUPS[args.device]
    corpus = build_corpus(args.workdir / "corpus", fmt="lm", vocab_size=8000, max_chars=2_000_000)
    command = " ".join(["python -m benchmarks", *argv]).replace(f" --note {args.note}", "")  # the note: below
    results = run_description(args.device, setup, command)
    if args.note:
        results["note"] = args.note
    results.update(measure(args.device, setup, corpus.data_bin, args.rounds, args.matmul_repeats))
    path = args.results_dir / f"{args.device}.json"
    _write(path, results)  # kept should fairseq-eval-lm fail
    if args.eval_lm_rounds:
        results["eval_lm"] = eval_lm_throughput(
            [v for v in variants_for("cpu") if not v.fp32_variant], setup, corpus.data_bin, args.workdir, args.device,
            args.eval_lm_rounds,  # fp32: the --bf16 variants are timed in the training step only
        )
        _write(path, results)


def lambert_command(args, argv: list):
    """LaMBERT against BERT on real pairs: write lambert_DEVICE.json, then render the doc."""
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("benchmarks: --device cuda: no CUDA device here")
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    corpus = build_corpus(args.workdir / "corpus_bert", fmt="bert", vocab_size=8000, max_chars=1_000_000)
    command = " ".join(["python -m benchmarks", *argv]).replace(f" --note {args.note}", "")
    results = run_description(args.device, SETUPS[args.device], command)
    del results["setup"]  # the LM benchmark's shapes; this one records its own batch
    if args.note:
        results["note"] = args.note
    results.update(measure_lambert(args.device, corpus.data_bin, args.batch, args.rounds))
    _write(args.results_dir / f"lambert_{args.device}.json", results)


def hf_generate_command(args, argv: list):
    """Greedy generate() of the exported LMs against transformers' GPT-2: write hf_generate_cpu.json."""
    import transformers

    from .hf_generate import measure_generate

    torch.set_num_threads(1)
    command = " ".join(["python -m benchmarks", *argv]).replace(f" --note {args.note}", "")
    results = run_description("cpu", SETUPS["cpu"], command)
    del results["setup"]  # the training benchmark's shapes; this one records its own
    results["versions"]["transformers"] = transformers.__version__
    if args.note:
        results["note"] = args.note
    results.update(measure_generate(args.builds, args.rounds, args.prompt_len, args.new_tokens))
    _write(args.results_dir / "hf_generate_cpu.json", results)


def paper_125m_command(args, argv: list):
    """The paper's 125M trained by fairseq-train on CPU, both models: write paper_125m_cpu.json."""
    from .paper_125m import measure_125m

    corpus = build_corpus(args.workdir / "corpus", fmt="lm", vocab_size=8000, max_chars=2_000_000)
    command = " ".join(["python -m benchmarks", *argv]).replace(f" --note {args.note}", "")
    results = run_description("cpu", SETUPS["cpu"], command)
    del results["setup"]  # the training benchmark's shapes; this one records its own
    if args.note:
        results["note"] = args.note
    results.update(measure_125m(corpus.data_bin, args.workdir, REPO_ROOT / "fairseq_normformer", args.rounds,
                                args.updates))  # fmt: skip
    _write(args.results_dir / "paper_125m_cpu.json", results)


def norm_schemes_command(args, argv: list):
    """Each normalization scheme and the fused FFN LN against Pre-LN at the small shape: norm_schemes_cpu.json."""
    from .norm_schemes import measure_norm_schemes

    torch.set_num_threads(1)
    command = " ".join(["python -m benchmarks", *argv]).replace(f" --note {args.note}", "")
    results = run_description("cpu", SMALL, command)
    if args.note:
        results["note"] = args.note
    results.update(measure_norm_schemes(args.workdir / "norm_schemes", args.rounds))
    _write(args.results_dir / "norm_schemes_cpu.json", results)


def _write(path: Path, results: dict):
    results["load_average"] = list(os.getloadavg())  # 1, 5, 15 minutes, at the end of the run
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {path}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=DOC.split("\n\n")[0])
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where DEVICE.json files live")
    parser.add_argument("--doc", type=Path, default=DOC_PATH, help="the Markdown file whose sections are rendered")
    commands = parser.add_subparsers(dest="command", required=True)
    m = commands.add_parser("measure", help="measure, write DEVICE.json, render the doc")
    m.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    m.add_argument("--threads", type=int, default=1, help="torch threads on CPU (1: CPU time = the work)")
    m.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (median)")
    m.add_argument("--eval-lm-rounds", type=int, default=3, help="fairseq-eval-lm runs per model; 0 skips")
    m.add_argument("--matmul-repeats", type=int, default=5, help="matmul-peak repeats (best)")
    m.add_argument("--workdir", type=Path, default=REPO_ROOT / "work" / "bench", help="corpus, checkpoints, logs")
    m.add_argument("--note", default="", help="a sentence about the run (e.g. the machine's load), kept in the JSON")
    lam = commands.add_parser("lambert", help="lambert_base against a BERT-base-shaped encoder on real pairs")
    lam.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    lam.add_argument("--threads", type=int, default=1, help="torch threads on CPU")
    lam.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (median)")
    lam.add_argument("--batch", type=int, default=8, help="sentence pairs a step")
    lam.add_argument("--workdir", type=Path, default=REPO_ROOT / "work" / "bench", help="where the corpus is built")
    lam.add_argument("--note", default="", help="a sentence about the run, kept in the JSON")
    gen = commands.add_parser("hf-generate", help="greedy generate() of the HF exports against GPT-2, one thread")
    gen.add_argument("--builds", type=int, default=25,
                     help="fresh builds of the models (the median of their ratios and its 95%% interval)")
    gen.add_argument("--rounds", type=int, default=10,
                     help="rounds a build, each model once a round (a build's ratio: the median of its rounds')")
    gen.add_argument("--prompt-len", type=int, default=16, help="prompt tokens")
    gen.add_argument("--new-tokens", type=int, default=64, help="greedy new tokens a generate() call")
    gen.add_argument("--note", default="", help="a sentence about the run (e.g. the machine's load), kept in the JSON")
    big = commands.add_parser("paper-125m", help="the paper's 125M, NormFormer and Pre-LN, trained by fairseq-train at "
                              "2048 tokens in bf16, one thread, alternating run by run (benchmarks/paper_125m.py)")
    big.add_argument("--rounds", type=int, default=2, help="fairseq-train runs of each model")
    big.add_argument("--updates", type=int, default=5, help="updates a run (the first is warm-up)")
    big.add_argument("--workdir", type=Path, default=REPO_ROOT / "work" / "bench", help="corpus and its GPT-2-sized copy")
    big.add_argument("--note", default="", help="a sentence about the run (e.g. the machine's load), kept in the JSON")
    norm = commands.add_parser("norm-schemes", help="each normalization scheme and the fused FFN LN (--ffn-norm-impl "
                               "compile) against Pre-LN at the recipes' small shape, one thread (issue 41)")
    norm.add_argument("--rounds", type=int, default=16, help="interleaved timing rounds (median; 16: about 4 minutes)")
    norm.add_argument("--workdir", type=Path, default=REPO_ROOT / "work" / "bench", help="where dict.txt is written")
    norm.add_argument("--note", default="", help="a sentence about the run (e.g. the machine's load), kept in JSON")
    commands.add_parser("render", help="render the doc from the stored DEVICE.json files, measuring nothing")
    args = parser.parse_args(argv)
    if args.command == "measure":
        measure_command(args, argv)
    elif args.command == "lambert":
        lambert_command(args, argv)
    elif args.command == "hf-generate":
        hf_generate_command(args, argv)
    elif args.command == "paper-125m":
        paper_125m_command(args, argv)
    elif args.command == "norm-schemes":
        norm_schemes_command(args, argv)
    render(args.results_dir, args.doc, REPO_ROOT)
    print(f"rendered {args.doc}")


if __name__ == "__main__":
    main()
