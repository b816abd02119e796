"""The one reader of fairseq's output (fairseq-train, fairseq-validate, fairseq-eval-lm, fairseq-generate): per-interval
training stats, epoch and validation stats, the parameter count, the training time and a terminal
numerical error. Both ``--log-format json`` and ``simple`` work::

    2026-01-01 10:00:00 | INFO | train_inner | {"epoch": 1, ..., "num_updates": "10", "lr": "0.001", "wall": "13"}
    2026-01-01 10:00:00 | INFO | train_inner | epoch 001:     10 / 113 loss=10.1, ..., num_updates=10, wall=13
    2026-01-01 10:00:01 | INFO | valid | {"epoch": 1, "valid_ppl": "1036.6", "valid_num_updates": "10"}
    2026-01-01 10:00:01 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 10.0 | ppl 1036.6 | num_updates 10
"""
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

_PARAMS = re.compile(r"num\. shared model params: ([\d,]+)")
_EVAL_LM = re.compile(r"Loss \(base 2\): ([\d.]+), Perplexity: ([\d.]+|inf|nan)")
_DONE = re.compile(r"done training in ([\d.]+) seconds")
# "2026-01-01 12:00:00 | INFO | fairseq_cli.train | " or "INFO:fairseq_cli.eval_lm:"
_PREFIX = re.compile(r"^(?:[\d-]+ [\d:]+ \| )?(?:INFO|WARNING|ERROR)\s*[|:]\s*[\w.]+\s*[|:]\s*")
_EVAL_LM_SPEED = re.compile(r"Evaluated ([\d,]+) tokens in ([\d.]+)s \(([\d.]+) tokens/s\)")
_GENERATE_BLEU = re.compile(r"Generate (\w+) with beam=\d+: BLEU\S* = ([\d.]+)")
_TRANSLATED = re.compile(r"Translated ([\d,]+) sentences")
_KEY_EQ_VALUE = re.compile(r"([\w/.\-]+)=([^,\s]+)")
# fairseq's terminal numerical failures (trainer, dynamic loss scaler, our --stop-on-activation-overflow)
_FAILURES = ("gradients are Nan/Inf", "Minimum loss scale reached", "ActivationOverflowError")


@dataclass
class TrainingLog:
    path: str
    train: List[dict] = field(default_factory=list)  # train_inner records, in order
    valid: List[dict] = field(default_factory=list)  # validation records of the chosen subset
    epochs: List[dict] = field(default_factory=list)  # end-of-epoch training records
    num_params: Optional[int] = None
    seconds: Optional[float] = None  # "done training in N seconds"
    failure: Optional[str] = None  # the first line naming a numerical failure

    def final_valid(self) -> dict:
        """The last validation; a run that stopped on a numerical failure has no final result to report."""
        if self.failure is not None:
            raise ValueError(f"{self.path} diverged ({self.failure}): it has no final validation")
        if not self.valid:
            raise ValueError(f"{self.path} has no validation results (was validation disabled?)")
        return self.valid[-1]

    def final_metric(self, metric: str) -> float:
        final = self.final_valid()
        if metric not in final:
            has = ", ".join(sorted(final))
            raise ValueError(f"the last validation of {self.path} has no {metric!r} (it has: {has})")
        return final[metric]

    def last_update(self) -> int:
        return max((r.get("num_updates", 0) for r in self.train + self.valid + self.epochs), default=0)

    def wall_at(self, update: int) -> Optional[float]:
        """fairseq's ``wall`` (seconds since training started) of the last training record at or
        before ``update``; exact when --log-interval divides the validation interval."""
        walls = [r["wall"] for r in self.train if r.get("num_updates", 0) <= update and "wall" in r]
        return walls[-1] if walls else None


def _number(value):
    if value is None:
        return None
    try:
        return int(value) if re.fullmatch(r"-?\d+", str(value)) else float(value)
    except ValueError:
        return value


def _parse_json(payload: str, prefix: str) -> dict:
    stats = json.loads(payload)
    return {k[len(prefix) :] if k.startswith(prefix) else k: _number(v) for k, v in stats.items()}


def _parse_simple(payload: str) -> dict:
    if "=" in payload:  # train_inner: "epoch 001:  10 / 113 loss=10.1, ppl=..., num_updates=10"
        return {k: _number(v) for k, v in _KEY_EQ_VALUE.findall(payload)}
    stats = {}  # "epoch 001 | valid on 'valid' subset | loss 10.0 | ppl 1036.6 | num_updates 10"
    for part in payload.split(" | "):
        key, _, value = part.strip().partition(" ")
        if value and " " not in value:
            stats[key] = _number(value)
    return stats


def _parse_stats(payload: str, prefix: str) -> dict:
    payload = payload.strip()
    return _parse_json(payload, prefix) if payload.startswith("{") else _parse_simple(payload)


def message(line: str) -> str:
    """A log line without fairseq's "time | level | logger |" prefix."""
    return _PREFIX.sub("", line).strip()


def parse_progress(line: str, subset: str = "valid"):
    """(source, stats) of one progress line (source: train_inner, train or ``subset``), else None."""
    parts = line.split(" | ", 3)
    if len(parts) < 4 or parts[2].strip() not in ("train_inner", "train", subset):
        return None
    source = parts[2].strip()
    prefix = {"train_inner": "", "train": "train_"}.get(source, f"{subset}_")
    return source, _parse_stats(parts[3], prefix)


def read_training_log(path, subset: str = "valid") -> TrainingLog:
    """Parse a fairseq-train log (stdout/stderr or --log-file) with the standard line prefix."""
    log = TrainingLog(str(path))
    records = {"train_inner": log.train, "train": log.epochs, subset: log.valid}
    for line in Path(path).read_text(errors="replace").splitlines():
        if log.failure is None and any(f in line for f in _FAILURES):
            log.failure = line.strip()
        if progress := parse_progress(line, subset):
            records[progress[0]].append(progress[1])
        elif log.num_params is None and (match := _PARAMS.search(line)):
            log.num_params = int(match.group(1).replace(",", ""))
        elif match := _DONE.search(line):
            log.seconds = float(match.group(1))
    if not log.train and not log.valid and log.failure is None:
        raise ValueError(
            f"{path} holds no fairseq-train progress lines ('... | INFO | train_inner | ...'); "
            "use --log-format json or simple (not tqdm)"
        )
    return log


def read_eval_lm(path) -> dict:
    """{"loss": base-2 loss per token, "ppl": perplexity, "tokens_per_s": speed or None} of the last
    evaluation ``fairseq-eval-lm`` printed."""
    text = Path(path).read_text(errors="replace")
    found, speeds = _EVAL_LM.findall(text), [m[2] for m in _EVAL_LM_SPEED.findall(text)]
    if not found:
        raise ValueError(f"{path} holds no 'Loss (base 2): ..., Perplexity: ...' line of fairseq-eval-lm")
    loss, ppl = found[-1]
    return {"loss": float(loss), "ppl": float(ppl), "tokens_per_s": float(speeds[-1]) if speeds else None}


def read_eval_lm_speed(path) -> dict:
    """{"tokens", "seconds", "tokens_per_second"} of ``fairseq-eval-lm``'s "Evaluated N tokens" line."""
    match = _EVAL_LM_SPEED.search(Path(path).read_text(errors="replace"))
    if match is None:
        raise ValueError(f"{path} holds no 'Evaluated N tokens in Xs (Y tokens/s)' line of fairseq-eval-lm")
    tokens, seconds, speed = match.groups()
    return {"tokens": int(tokens.replace(",", "")), "seconds": float(seconds), "tokens_per_second": float(speed)}


def read_generate_bleu(path) -> dict:
    """{"subset", "bleu", "sentences"} of the last "Generate SUBSET with beam=N: BLEU = X ..." line of
    ``fairseq-generate`` (--scoring sacrebleu or bleu) and of its "Translated N sentences" line."""
    text = Path(path).read_text(errors="replace")
    found, translated = _GENERATE_BLEU.findall(text), _TRANSLATED.findall(text)
    if not found or not translated:
        raise ValueError(f"{path} holds no 'Translated N sentences' and 'Generate <subset> with beam=N: BLEU = ...' "
                         "lines of fairseq-generate")  # fmt: skip
    subset, bleu = found[-1]
    return {"subset": subset, "bleu": float(bleu), "sentences": int(translated[-1].replace(",", ""))}
