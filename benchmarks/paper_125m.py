"""The paper's 125M (GPT-3 Small) trained on this CPU (issue 42): ``normformer_lm_gpt3_small`` and
``preln_lm_gpt3_small`` by fairseq-train at ``--tokens-per-sample 2048``, one sequence an update, ``--bf16``,
the paper's Adam at a constant 6e-4 for both. Each run is its own process (its peak RSS is its own),
the two models alternate run by run, and each update's time is read from fairseq's log (tokens / wps).
The dictionary is GPT-2's size (the corpus's pieces, then unused symbols up to 50,264), so the models
are the paper's 123.7M and 123.8M parameters."""
import json
import os
import re
import subprocess
import time
from pathlib import Path

from fairseq_normformer import memory_plan, paper

ARCHS = {"preln": "preln_lm_gpt3_small", "normformer": "normformer_lm_gpt3_small"}
SEQ_LEN = 2048
LOG_LINE = re.compile(r"\| train_inner \| (\{.*\})")


def gpt2_sized_data(data_bin: Path, out: Path) -> Path:
    """``data_bin``'s data with its dictionary extended by unused symbols to GPT-2's 50,264 entries."""
    out.mkdir(parents=True, exist_ok=True)
    for f in data_bin.iterdir():
        if f.suffix in (".bin", ".idx") and not (out / f.name).exists():
            (out / f.name).symlink_to(f.resolve())
    lines = (data_bin / "dict.txt").read_text().splitlines()
    unused = memory_plan.GPT2_VOCAB - 4 - len(lines)  # fairseq's 4 specials are not in dict.txt
    (out / "dict.txt").write_text("\n".join(lines + [f"madeupword{i:05d} 0" for i in range(unused)]) + "\n")
    return out


def train(arch: str, data: Path, updates: int, user_dir: Path) -> dict:
    """One fairseq-train process: per update its loss and seconds (tokens / wps), and the process's
    peak RSS and CPU seconds."""
    cmd = ["nice", "fairseq-train", str(data), "--user-dir", str(user_dir), "--task", "language_modeling",
           "--arch", arch, "--tokens-per-sample", str(SEQ_LEN), "--sample-break-mode", "none", "--batch-size", "1",
           "--bf16", "--cpu", *paper.optimizer_args(), "--lr", "6e-4", "--max-update", str(updates),
           "--log-format", "json", "--log-interval", "1", "--no-save", "--disable-validation",
           "--num-workers", "0", "--seed", "1"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if status:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{output[-3000:]}")
    logs = [json.loads(m) for m in LOG_LINE.findall(output)]
    return {"loss": [float(r["loss"]) for r in logs], "step_seconds": [float(r["wpb"]) / float(r["wps"]) for r in logs],
            "peak_rss_bytes": usage.ru_maxrss * 1024, "cpu_seconds": usage.ru_utime + usage.ru_stime,
            "wall_seconds": time.perf_counter() - start}  # fmt: skip


def planned_bytes(arch: str) -> dict:
    """The memory plan for one process, bf16, one sequence of 2048 tokens, dropout 0.1 (no DDP buckets)."""
    p = memory_plan.plan(arch, "bf16", "c10d", 1, 1, SEQ_LEN, False, True)
    return {name: n for name, n in p.bytes.items() if name not in ("ddp_buckets", "fsdp_gathered")}


def measure_125m(data_bin: Path, workdir: Path, user_dir: Path, rounds: int, updates: int) -> dict:
    """``rounds`` runs of each model of ``updates`` updates, alternating (the first model changes each round)."""
    data = gpt2_sized_data(data_bin, workdir / "data_gpt2_vocab")
    runs = {name: [] for name in ARCHS}
    for r in range(rounds):
        for name in (list(ARCHS) if r % 2 == 0 else list(ARCHS)[::-1]):
            runs[name].append(train(ARCHS[name], data, updates, user_dir))
            last = runs[name][-1]
            print(f"round {r + 1}/{rounds} {name}: seconds per update {[round(s, 1) for s in last['step_seconds']]}, "
                  f"loss {last['loss'][0]:.2f} -> {last['loss'][-1]:.2f}, "
                  f"peak RSS {last['peak_rss_bytes'] / 2**30:.2f} GiB", flush=True)  # fmt: skip
    return {"seq_len": SEQ_LEN, "batch": 1, "updates_per_run": updates, "runs": runs,
            "planned_bytes": {name: planned_bytes(arch) for name, arch in ARCHS.items()}}  # fmt: skip
