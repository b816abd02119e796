"""``make demo``: a Pre-LN baseline and a NormFormer trained on the standard library's docstrings.

    python -m fairseq_normformer.cli.demo --workdir work/demo

1. builds the corpus (``normformer-build-corpus``; reused when already built),
2. trains both models with the real ``fairseq-train --user-dir <this package>`` for the same number of
   updates (no wall-clock cap unless ``--stop-time-hours`` sets one), side by side with ``--threads`` threads each,
3. scores the valid split with ``fairseq-eval-lm`` and prints a table; runs a cap stopped after different
   updates are compared at the last update both validated at.

Everything lands under --workdir: ``corpus_*/`` and ``runs/<model>-<hash of the command>/`` (checkpoints,
``train.log``, ``eval.log``, ``commands.sh``, ``done``: the run-directory convention of docs/recipes.md).
A finished run with the same command is reused, an interrupted one resumes from its checkpoint_last.pt;
a changed setting gets a new run directory; DRY_RUN=1 prints the training commands only. See docs/demo.md.
"""
import argparse
import hashlib
import json
import math
import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis.training_log import message, parse_progress, read_eval_lm, read_training_log
from ..corpus.stdlib import build_corpus
from ..runs.run_dir import dry_run, is_done, log_command, mark_done
from . import script
from .build_corpus import summary
from .user_dir import user_dir

NORMFORMER_FLAGS = ["--scale-attn", "--scale-fc", "--scale-heads"]  # the paper's three operations


@dataclass
class Run:
    name: str
    model_flags: list
    lr: float
    dir: Path = None
    reused: bool = False  # a finished run of the same command was found
    results: dict = field(default_factory=dict)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fairseq_normformer.cli.demo",
                                description=__doc__.split("\n")[0])
    p.add_argument("--workdir", type=Path, default=Path("work/demo"), help="where the corpus and the runs go (default: work/demo)")
    p.add_argument("--updates", type=int, default=600, help="updates for each model (same for both)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate of both models")
    p.add_argument("--normformer-lr", type=float, default=None,
                   help="peak LR of the NormFormer (default: --lr; the paper raises it, see docs/demo.md)")
    p.add_argument("--layers", type=int, default=4, help="decoder layers of both models")
    p.add_argument("--embed-dim", type=int, default=128, help="model dim d; the FFN is 4d")
    p.add_argument("--heads", type=int, default=4, help="attention heads")
    p.add_argument("--tokens-per-sample", type=int, default=128, help="sequence length in pieces")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per update")
    p.add_argument("--dropout", type=float, default=0.1, help="dropout of both models")
    p.add_argument("--vocab-size", type=int, default=4000, help="SentencePiece vocabulary")
    p.add_argument("--max-chars", type=int, default=None, help="cap the corpus (default: all of it)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of each fairseq process")
    p.add_argument("--jobs", type=int, default=2, help="models trained at the same time")
    p.add_argument("--stop-time-hours", type=float, default=0,
                   help="wall-clock cap of each fairseq-train run (default: none)")
    return p  # fmt: skip


def train_command(run: Run, data_bin: Path, args) -> list:
    """fairseq-train without --save-dir (see ``with_run_dir``)."""
    d, updates = args.embed_dim, args.updates
    return [
        script("fairseq-train"), str(data_bin), "--user-dir", str(user_dir()),
        "--task", "language_modeling", "--tokens-per-sample", str(args.tokens_per_sample),
        "--arch", "normformer_lm", "--decoder-layers", str(args.layers), "--decoder-embed-dim", str(d),
        "--decoder-ffn-embed-dim", str(4 * d), "--decoder-attention-heads", str(args.heads),
        "--activation-fn", "gelu", "--share-decoder-input-output-embed", "--dropout", str(args.dropout),
        *run.model_flags,
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--weight-decay", "0.01", "--clip-norm", "1.0",
        "--lr", str(run.lr), "--lr-scheduler", "polynomial_decay", "--warmup-updates", str(max(1, updates // 10)),
        "--total-num-update", str(updates), "--max-update", str(updates),
        *(["--stop-time-hours", str(args.stop_time_hours)] if args.stop_time_hours > 0 else []),
        "--batch-size", str(args.batch_size),
        "--required-batch-size-multiple", "1",  # else fairseq drops a last training batch of < 8 (issue #5036)
        "--seed", "1", "--num-workers", "0", "--log-format", "json", "--log-interval", str(max(1, updates // 12)),
        "--no-epoch-checkpoints",
    ]  # fmt: skip


def eval_command(run: Run, data_bin: Path, args) -> list:
    """Valid perplexity of checkpoint_last.pt on the training's block size (no extra context)."""
    return [
        script("fairseq-eval-lm"), str(data_bin), "--user-dir", str(user_dir()), "--path",
        str(run.dir / "checkpoint_last.pt"), "--gen-subset", "valid", "--tokens-per-sample",
        str(args.tokens_per_sample), "--batch-size", str(args.batch_size), "--num-workers", "0",
    ]  # fmt: skip


def fairseq_env(threads: int) -> dict:
    """torch threads of a fairseq process; unbuffered output so that progress shows as it happens."""
    threads = str(threads)
    return {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "PYTHONUNBUFFERED": "1"}


# --- Progress -----------------------------------------------------------------------------------
def condensed(line: str):
    """A short progress line for fairseq's training log lines worth showing, else None."""
    source, s = parse_progress(line) or (None, None)
    if source == "train_inner":
        return f"update {s['num_updates']:>5}  loss {s['loss']:>6}  ppl {s['ppl']:>8}  {s['wps']:>7} tokens/s"
    if source == "valid":
        return f"valid after {s['num_updates']} updates: loss {s['loss']}  ppl {s['ppl']}"
    for key in ("num. shared model params", "Stopping training", "Loaded checkpoint", "Evaluated", "Perplexity"):
        if key in line:
            return message(line)
    return None


class LoggedProcess:
    """``cmd`` (logged in the run directory's commands.sh) with its output appended to the run
    directory's ``log_name``, and a condensed echo of its progress."""

    def __init__(self, cmd: list, run_dir: Path, log_name: str, name: str, threads: int):
        self.log_path, self.name = run_dir / log_name, name
        env = fairseq_env(threads)
        log_command(run_dir, cmd, env, log=self.log_path, append=True)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.echo = threading.Thread(target=self._echo, daemon=True)
        self.echo.start()

    def _echo(self):
        with self.log_path.open("a", encoding="utf-8") as log:
            for line in self.proc.stdout:
                log.write(line)
                short = condensed(line)
                if short:
                    print(f"  [{self.name:<10}] {short}", flush=True)

    def wait_ok(self, what: str):
        self.proc.wait()
        self.echo.join()
        if self.proc.returncode != 0:
            tail = "".join(self.log_path.read_text(encoding="utf-8").splitlines(keepends=True)[-30:])
            raise SystemExit(f"demo: {what} failed (exit {self.proc.returncode}); {self.log_path} ends:\n{tail}")


# --- Steps --------------------------------------------------------------------------------------
def with_run_dir(run: Run, cmd: list, workdir: Path) -> list:
    """Save into runs/<name>-<hash of the command>: same settings, same directory (reused or resumed)."""
    digest = hashlib.sha1(json.dumps(cmd).encode()).hexdigest()[:8]
    run.dir = workdir / "runs" / f"{run.name}-{digest}"
    run.dir.mkdir(parents=True, exist_ok=True)
    return cmd + ["--save-dir", str(run.dir)]


def train(runs: list, data_bin: Path, args):
    """fairseq-train for every run not finished yet, ``args.jobs`` at a time."""
    pending = []
    for run in runs:
        cmd = with_run_dir(run, train_command(run, data_bin, args), args.workdir.absolute())
        run.reused = is_done(run.dir)
        if run.reused:
            print(f"  [{run.name:<10}] reusing the finished run in {run.dir}")
        elif dry_run():
            line = log_command(run.dir, cmd, fairseq_env(args.threads), log=run.dir / "train.log", append=True)
            print(f"  [{run.name:<10}] would train in {run.dir}\n    $ {line}")
        else:
            what = "resuming" if (run.dir / "checkpoint_last.pt").exists() else "training"
            print(f"  [{run.name:<10}] {what} in {run.dir}\n    $ {shlex.join(cmd)}")
            pending.append((run, cmd))
    for i in range(0, len(pending), args.jobs):
        train_side_by_side(pending[i : i + args.jobs], args.threads)


def train_side_by_side(jobs: list, threads: int):
    """Run [(run, command)] at the same time; when one fails, stop the others (checkpoints stay)."""
    procs = [(run, LoggedProcess(cmd, run.dir, "train.log", run.name, threads)) for run, cmd in jobs]
    try:
        for run, proc in procs:
            proc.wait_ok(f"fairseq-train of {run.name}")
            mark_done(run.dir)
    finally:
        for _, proc in procs:
            if proc.proc.poll() is None:
                proc.proc.terminate()


def evaluate(run: Run, data_bin: Path, args):
    """fairseq-eval-lm of the run's checkpoint_last.pt; a reused run keeps its complete eval.log."""
    log = run.dir / "eval.log"
    if run.reused and log.exists() and "Perplexity:" in log.read_text(encoding="utf-8"):
        print(f"  [{run.name:<10}] reusing {log}")
        return
    log.unlink(missing_ok=True)
    proc = LoggedProcess(eval_command(run, data_bin, args), run.dir, log.name, run.name, args.threads)
    proc.wait_ok(f"fairseq-eval-lm of {run.name}")


def read_logged(read, path):
    try:
        return read(path)
    except ValueError as e:
        raise SystemExit(f"demo: {e}")


def training_results(run: Run) -> dict:
    """Parameters, updates and the valid perplexity of each validation {update: ppl} from fairseq-train's log."""
    train_log = read_logged(read_training_log, run.dir / "train.log")
    validated = {r["num_updates"]: r["ppl"] for r in train_log.valid}
    return {"params": train_log.num_params, "updates": train_log.last_update(), "validated": validated}


def evaluation_results(run: Run) -> dict:
    """Perplexity and speed from fairseq-eval-lm's log."""
    evaluation = read_logged(read_eval_lm, run.dir / "eval.log")
    return {"ppl": evaluation["ppl"], "tokens_per_s": evaluation["tokens_per_s"]}


def stopped_after(runs: list, args) -> str:
    return ", ".join(f"{run.name} after {run.results['updates']}" for run in runs) + f", of {args.updates}"


def compared_update(runs: list, args):
    """None when every run trained for the same number of updates; else the last update all of them
    validated at (a cap stopped them after different updates). SystemExit when they share none."""
    if len({run.results["updates"] for run in runs}) == 1:
        return None
    common = set.intersection(*(set(run.results["validated"]) for run in runs))
    if not common:
        raise SystemExit(f"demo: no comparison: --stop-time-hours {args.stop_time_hours} stopped the runs after "
                         f"different numbers of updates ({stopped_after(runs, args)}) before any validation they "
                         f"share; rerun without --stop-time-hours (these runs stay in {args.workdir / 'runs'})")
    return max(common)


def compare_at(runs: list, update: int, args) -> str:
    """Each run's perplexity and updates set to its validation at ``update``; the note that says so."""
    stopped = stopped_after(runs, args)
    for run in runs:
        run.results.update(updates=update, ppl=run.results["validated"][update])
    return (f"note: --stop-time-hours {args.stop_time_hours} stopped the runs after different numbers of updates "
            f"({stopped}); they are compared at update {update}, the last both validated at (fairseq-train's "
            "valid perplexity there; eval tokens/s of the last checkpoints)")


def table(runs: list) -> str:
    rows = [f"{'model':<12}{'params':>12}{'updates':>9}{'lr':>9}{'valid ppl':>11}{'eval tokens/s':>15}"]
    for run in runs:
        r = run.results
        rows.append(
            f"{run.name:<12}{r['params']:>12,}{r['updates']:>9}{run.lr:>9.1e}{r['ppl']:>11.2f}"
            f"{r['tokens_per_s']:>15,.0f}"
        )
    return "\n".join(rows)


def check_args(args):
    if args.embed_dim % args.heads:
        raise SystemExit(f"demo: --embed-dim {args.embed_dim} is not divisible by --heads {args.heads}")
    for name in ("updates", "layers", "threads", "jobs", "batch_size", "tokens_per_sample"):
        if getattr(args, name) < 1:
            raise SystemExit(f"demo: --{name.replace('_', '-')} must be at least 1")
    if args.lr <= 0 or (args.normformer_lr is not None and args.normformer_lr <= 0):
        raise SystemExit("demo: learning rates must be positive")


def main(argv=None):
    args = get_parser().parse_args(argv)
    check_args(args)
    start = time.time()
    corpus_name = f"corpus_v{args.vocab_size}" + (f"_c{args.max_chars}" if args.max_chars else "")
    corpus_dir = args.workdir / corpus_name
    print(f"[1/3] corpus: Python {sys.version.split()[0]} standard-library docstrings -> {corpus_dir}")
    try:
        corpus = build_corpus(corpus_dir, fmt="lm", vocab_size=args.vocab_size, max_chars=args.max_chars)
    except (ValueError, FileExistsError) as e:
        raise SystemExit(f"demo: {e}")
    print(summary(corpus.raw_dir.parent))
    normformer_lr = args.lr if args.normformer_lr is None else args.normformer_lr
    runs = [Run("preln", [], args.lr), Run("normformer", NORMFORMER_FLAGS, normformer_lr)]
    print(f"[2/3] fairseq-train: {args.updates} updates each, {args.jobs} at a time, "
          f"{args.threads} thread(s) each")
    train(runs, corpus.data_bin, args)
    if dry_run():
        return
    for run in runs:
        run.results = training_results(run)
    update = compared_update(runs, args)
    print("[3/3] fairseq-eval-lm on the valid split")
    for run in runs:
        evaluate(run, corpus.data_bin, args)
        run.results.update(evaluation_results(run))
    note = compare_at(runs, update, args) if update is not None else None
    print(f"\n{table(runs)}\n")
    if note:
        print(note)
    elif runs[0].results["updates"] < args.updates:
        print(f"note: --stop-time-hours stopped both runs after {runs[0].results['updates']} of {args.updates} "
              "updates; they are compared at that point")
    if not all(math.isfinite(run.results["ppl"]) for run in runs):
        print("note: a model diverged (non-finite perplexity)")
    print(f"valid ppl: per SentencePiece token. The demo took {time.time() - start:.0f}s; "
          f"logs are in {args.workdir / 'runs'}")


if __name__ == "__main__":
    main()
