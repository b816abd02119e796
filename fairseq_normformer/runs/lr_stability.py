"""The LR stability test (Table 3): warm the learning rate up linearly towards a very large peak
and find where training breaks, and which operation broke first.

One run is the real ``fairseq-train`` with ``--task language_modeling_analysis``, the polynomial
schedule's linear warmup over the whole run (``--max-update`` = ``--warmup-updates``) and the
activation monitor (``analysis/activations.py``):
- fp32 (CPU or GPU): an activation above the threshold (default 65504, the fp16 maximum) is where
  fp16 would have produced inf; the run stops there (``--stop-on-activation-overflow``).
- ``--fp16``/``--memory-efficient-fp16``/``--bf16``/``--amp`` (GPU): the monitor records every
  overflow and fairseq's loss scaler decides; the run ends when it cannot recover
  ("Minimum loss scale reached") or the gradients are non-finite.
The last good update is the last one fairseq logged (``--log-interval 1``); the learning rate
reached is the one the next, failing, update used. The output directory follows the run-directory
convention (runs/run_dir.py): the command in ``commands.sh``, ``done`` after ``result.json``, DRY_RUN=1.
A run stopped by SIGTERM or SIGUSR1 (a preempted or requeued job: normformer-sweep's stability points) stops
fairseq-train too; run again on its directory, the test starts over (it saves no checkpoint to resume from),
the stopped attempt's train.log and overflows.jsonl kept in ``stopped-K/``.
"""
import json
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import List, Optional

from ..instrumentation.activations import FP16_MAX
from ..analysis.training_log import read_training_log
from .run_dir import dry_run, is_done, log_command, mark_done

MIXED_PRECISION_FLAGS = ("--fp16", "--memory-efficient-fp16", "--bf16", "--amp")
# Set by the runner; a user's extra arguments must not repeat them.
RUNNER_FLAGS = ("--task", "--lr", "--lr-scheduler", "--warmup-updates", "--total-num-update", "--max-update",
                "--log-format", "--log-interval", "--save-dir", "--user-dir")  # fmt: skip
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # forwarded to fairseq-train (a preemption, a requeue)
ATTEMPT_FILES = ("train.log", "overflows.jsonl")  # what a stopped attempt leaves, kept in stopped-K/


@dataclass
class StabilityResult:
    outcome: str  # "diverged" or "stable" (reached the peak learning rate)
    reason: str
    peak_lr: float
    warmup_updates: int
    last_good_update: int
    lr_reached: Optional[float]  # the learning rate of the failing update (the peak when stable)
    first_overflow: Optional[dict]  # update, lr, name, layer, operation, max_abs, threshold
    log: str

    def describe(self) -> str:
        if self.outcome == "stable":
            return f"stable up to the peak lr {self.peak_lr:g} ({self.last_good_update} updates)"
        where = ""
        if self.first_overflow:
            o = self.first_overflow
            where = f"; first overflow: layer {o['layer']} {o['operation']} at update {o['update']}"
        lr = "?" if self.lr_reached is None else f"{self.lr_reached:g}"
        return f"diverged after update {self.last_good_update} at lr {lr} ({self.reason}){where}"


def _user_dir() -> str:
    return str(Path(__file__).resolve().parent.parent)


def stability_command(data, out_dir, peak_lr, warmup_updates, threshold, train_args: List[str]) -> List[str]:
    """The fairseq-train command line of one run."""
    clashes = [a.split("=")[0] for a in train_args if a.split("=")[0] in RUNNER_FLAGS]
    if clashes:
        raise ValueError(f"the LR stability runner sets {', '.join(clashes)} itself; remove them")
    out_dir = Path(out_dir)
    stop = [] if any(a in MIXED_PRECISION_FLAGS for a in train_args) else ["--stop-on-activation-overflow"]
    return [
        sys.executable, "-m", "fairseq_cli.train", str(data), "--user-dir", _user_dir(),
        "--task", "language_modeling_analysis",
        "--activation-overflow-threshold", str(threshold),
        "--activation-overflow-file", str(out_dir / "overflows.jsonl"), *stop,
        "--lr", str(peak_lr), "--lr-scheduler", "polynomial_decay",
        "--warmup-updates", str(warmup_updates), "--total-num-update", str(warmup_updates),
        "--max-update", str(warmup_updates),
        "--log-format", "json", "--log-interval", "1", "--save-dir", str(out_dir / "checkpoints"),
        *train_args,
    ]  # fmt: skip


def summarize(out_dir, peak_lr: float, warmup_updates: int) -> StabilityResult:
    """Read one run's train.log and overflows.jsonl."""
    out_dir = Path(out_dir)
    log = read_training_log(out_dir / "train.log")
    overflow_file = out_dir / "overflows.jsonl"
    overflows = [json.loads(line) for line in overflow_file.read_text().splitlines()] if overflow_file.exists() else []
    last = log.train[-1] if log.train else {}
    last_good = last.get("num_updates", 0)
    if log.failure is None:
        outcome, reason, lr_reached = "stable", "reached the peak learning rate", peak_lr
    else:
        outcome = "diverged"
        reason = "activation overflow" if "ActivationOverflowError" in log.failure else log.failure.split(": ", 1)[-1]
        # the failing update's lr: recorded with its overflow, else the lr fairseq set after the last good one
        failing = [o for o in overflows if o["update"] == last_good + 1]
        lr_reached = failing[0]["lr"] if failing else last.get("lr")
    first_overflow = overflows[0] if overflows else None
    return StabilityResult(outcome, reason[:160], peak_lr, warmup_updates, last_good, lr_reached, first_overflow,
                           str(out_dir / "train.log"))  # fmt: skip


def run_lr_stability(data, out_dir, peak_lr: float, warmup_updates: int, train_args: List[str],
                     threshold: float = FP16_MAX) -> Optional[StabilityResult]:  # fmt: skip
    """Run fairseq-train once, write ``out_dir/result.json`` and return the result (None with DRY_RUN=1,
    which prints the command only)."""
    if peak_lr <= 0 or warmup_updates < 1:
        raise ValueError(f"need a positive peak lr and warmup updates, got {peak_lr} and {warmup_updates}")
    out_dir = Path(out_dir)
    if is_done(out_dir):
        raise FileExistsError(f"{out_dir} already holds a finished run (done); choose another directory")
    cmd = stability_command(data, out_dir, peak_lr, warmup_updates, threshold, train_args)
    line = log_command(out_dir, cmd, log=out_dir / "train.log")
    if dry_run():
        print(line)
        return None
    keep_stopped_attempt(out_dir)
    returncode, stopped_by = run_forwarding_stops(cmd, out_dir / "train.log")
    if stopped_by is not None:
        raise RuntimeError(f"{out_dir}: stopped by {stopped_by.name} before the test finished; run the same "
                           "command to start it again")
    result = summarize(out_dir, peak_lr, warmup_updates)
    if returncode != 0 and result.outcome == "stable":
        tail = "\n".join((out_dir / "train.log").read_text().splitlines()[-20:])
        raise RuntimeError(f"fairseq-train failed for another reason than divergence:\n{tail}")
    (out_dir / "result.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    mark_done(out_dir)
    return result


def keep_stopped_attempt(out_dir: Path):
    """An unfinished attempt's files (a stopped run's: no ``done``) moved into ``out_dir/stopped-K``, so that the
    test starts over in ``out_dir`` and the attempt is kept."""
    files = [out_dir / name for name in ATTEMPT_FILES if (out_dir / name).exists()]
    if not files:
        return
    k = 1 + sum(1 for _ in out_dir.glob("stopped-*"))
    kept = out_dir / f"stopped-{k}"
    kept.mkdir()
    for path in files:
        path.rename(kept / path.name)
    print(f"{out_dir} held a stopped attempt, kept in {kept.name}/; the test starts again", file=sys.stderr)


def run_forwarding_stops(cmd: List[str], log: Path) -> tuple:
    """fairseq-train with its output in ``log``; a STOP_SIGNALS signal to this process is sent on to it. Its exit
    status, and the signal that stopped it (None when none came)."""
    received = []
    with open(log, "w") as log_file:
        process = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)

        def forward(signum, _frame):
            received.append(signal.Signals(signum))
            process.send_signal(signum)

        previous = {signum: signal.signal(signum, forward) for signum in STOP_SIGNALS}
        try:
            returncode = process.wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
    return returncode, (received[0] if received else None)


def read_result(out_dir) -> StabilityResult:
    return StabilityResult(**json.loads((Path(out_dir) / "result.json").read_text()))
