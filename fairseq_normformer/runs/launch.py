"""The fairseq-train arguments of the launch scripts (examples/slurm/), in one process: the paper's
run of ARCH on N processes (paper.py, Table 6), the memory plan on GPUs or gloo on CPU, the scripts'
bookkeeping flags. On stderr: the memory plan, the tokens per update of the arguments that run
(read back with fairseq's parser, the user's arguments after the data directory included), and one
warning line when sizes differ from the paper's but its schedule is kept (docs/distributed.md)::

    python -m fairseq_normformer.runs.launch --arch normformer_lm_gpt3_small --processes 2 --cpu \\
        --save-dir SAVE -- DATA_BIN --batch-size 8 --tokens-per-sample 128    # prints LM_ARGS=(...)
"""
import argparse
import logging
import shlex
import sys

from fairseq import options

from .. import memory_plan, paper
from ..cli.user_dir import user_dir

BOOKKEEPING = ["--task", "language_modeling", "--sample-break-mode", "none", "--required-batch-size-multiple", "1",
               "--num-workers", "2", "--save-interval-updates", "1000", "--no-epoch-checkpoints",
               "--log-format", "json", "--log-interval", "100"]  # fmt: skip
SHAPE = ("decoder_layers", "decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_attention_heads")


def size_and_model(arch: str) -> tuple:
    """normformer_lm_gpt3_small -> ("125M", "normformer")"""
    for model, prefix in paper.MODELS.items():
        size = paper.PRESET_SIZES.get(arch.removeprefix(f"{prefix}_"))
        if arch.startswith(f"{prefix}_") and size:
            return size, model
    raise ValueError(f"no paper settings for --arch {arch} (one of the *_gpt3_* presets)")


def paper_run(a) -> tuple:
    """(the paper's settings of a.arch on a.processes, its fairseq-train arguments but the data directory)"""
    s = paper.settings("6", *size_and_model(a.arch), a.processes, a.batch_size)
    groups = paper.run_args(s)
    argv = [*groups["MODEL"], *groups["BATCH"], *paper.optimizer_args(), *groups["SCHEDULE"]]
    if a.cpu:
        argv += ["--cpu", "--distributed-backend", "gloo"]
    else:
        plan = memory_plan.auto_plan(s["arch"], "memory-efficient-fp16", a.processes, s["batch_size"],
                                     s["tokens_per_sample"], a.gpu_memory, s["dropout"] > 0)  # fmt: skip
        print("\n".join(memory_plan.report_lines(plan)), file=sys.stderr)
        paper.with_plan(s, plan)
        argv += [*s["precision"], *s["memory_args"]]
    lr = a.lr or paper.lr_text(s["lrs"][0])
    return s, argv + [*BOOKKEEPING, "--user-dir", a.user_dir or str(user_dir()), "--lr", lr, "--save-dir", a.save_dir]


def parsed(argv: list) -> argparse.Namespace:
    logging.getLogger("fairseq.utils").setLevel(logging.WARNING)  # not "--user-dir ... has already been imported"
    return options.parse_args_and_arch(options.get_training_parser(), argv)


def tokens_per_update(args, processes: int) -> tuple:
    """(sentences per process and pass, tokens per update) of parsed fairseq-train arguments: fixed-size
    blocks of --tokens-per-sample, --batch-size of them, fewer if --max-tokens holds fewer."""
    sentences = args.batch_size or sys.maxsize
    if args.max_tokens:
        sentences = min(sentences, args.max_tokens // args.tokens_per_sample)
    return sentences, processes * sentences * args.tokens_per_sample * args.update_freq[0]


def arithmetic_line(args, processes: int) -> str:
    sentences, tokens = tokens_per_update(args, processes)
    unit = ("process" if args.cpu else "GPU") + ("es" if args.cpu and processes > 1 else "s" if processes > 1 else "")
    return (f"{processes} {unit} x {sentences} sentences x {args.tokens_per_sample} "
            f"tokens x update-freq {args.update_freq[0]} = {tokens} tokens per update")  # fmt: skip


def schedule_warning(args, paper_args, s: dict, processes: int):
    """One line when the run's sizes (tokens per update, model shape, length) are not the paper's
    but its warmup and decay (for 300B tokens) are; else None."""
    tokens = tokens_per_update(args, processes)[1]
    changed = [f"{tokens} tokens per update (the paper's {s['tokens_per_update']})"] if tokens != s["tokens_per_update"] else []
    changed += [f"--{name.replace('_', '-')} {getattr(args, name)}" for name in (*SHAPE, "max_update")
                if getattr(args, name) != getattr(paper_args, name)]  # fmt: skip
    schedule = ("lr_scheduler", "warmup_updates", "total_num_update")
    if not changed or any(getattr(args, name) != getattr(paper_args, name) for name in schedule):
        return None
    return (f"warning: {', '.join(changed)} with the paper's schedule (--warmup-updates {args.warmup_updates} "
            f"--total-num-update {args.total_num_update}, for 300B tokens): give the run its own --warmup-updates, "
            "--total-num-update and --lr (docs/distributed.md#a-small-run)")  # fmt: skip


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fairseq_normformer.runs.launch", description=__doc__.split("\n\n")[0])
    p.add_argument("--prog", default="launch", help="the launch script's name, for error messages")
    p.add_argument("--arch", required=True, help="a *_gpt3_* preset")
    p.add_argument("--processes", type=int, required=True, help="GPUs (processes) in all")
    p.add_argument("--batch-size", type=int, default=None, help="sequences per GPU and pass (default: the authors')")
    p.add_argument("--lr", default=None, help="default: the paper's for --arch")
    p.add_argument("--save-dir", required=True)
    p.add_argument("--user-dir", default=None, help="default: this plugin (normformer-user-dir)")
    device = p.add_mutually_exclusive_group(required=True)
    device.add_argument("--gpu-memory", type=float, help="GB per GPU, for the memory plan")
    device.add_argument("--cpu", action="store_true", help="CPU processes: fp32, gloo, no memory plan")
    p.add_argument("fairseq_args", nargs="+", help="after --: the data directory, then the user's fairseq-train arguments")
    return p


def main(argv=None):
    a = get_parser().parse_args(argv)
    data, *extra = a.fairseq_args
    try:
        s, run = paper_run(a)
    except ValueError as e:
        sys.exit(f"{a.prog}: error: {e}")
    args, paper_args = parsed([data, *run, *extra]), parsed([data, *run])
    print(arithmetic_line(args, a.processes), file=sys.stderr)
    warning = schedule_warning(args, paper_args, s, a.processes)
    if warning:
        print(warning, file=sys.stderr)
    print(f"LM_ARGS=({shlex.join(run)})")


if __name__ == "__main__":
    main()
