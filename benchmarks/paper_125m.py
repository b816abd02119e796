"""The paper's 125M (GPT-3 Small) trained on this CPU (issue 42): ``normformer_lm_gpt3_small`` and
``preln_lm_gpt3_small`` by fairseq-train at ``--tokens-per-sample 2048``, one sequence an update, ``--bf16``,
the paper's Adam at a constant 6e-4 for both. Each run is its own process (its peak RSS is its own),
the two models alternate run by run; each update after the first is timed by the wall clock (fairseq's
log: tokens / wps) and by the process's CPU time between two log lines.
Dropout is the presets' default, 0 (with attention dropout SDPA takes its math kernel on the CPU, which
keeps the T x T probabilities). The dictionary is GPT-2's size (the corpus's pieces, then unused
symbols up to 50,264), so the models are the paper's 123.7M and 123.8M parameters."""
import json
import os
import re
import subprocess
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


def train(arch: str, data: Path, updates: int, user_dir: Path, log: Path) -> dict:
    """One fairseq-train process (its output kept in ``log``): per update its loss and, from the second
    on, its seconds by clock: "wall" (tokens / wps) and "cpu", the process's CPU time between two log
    lines (the work, without the waiting for a core on a shared machine); the peak RSS."""
    cmd = ["nice", "fairseq-train", str(data), "--user-dir", str(user_dir), "--task", "language_modeling",
           "--arch", arch, "--tokens-per-sample", str(SEQ_LEN), "--sample-break-mode", "none", "--batch-size", "1",
           "--bf16", "--cpu", *paper.optimizer_args(), "--lr", "6e-4", "--max-update", str(updates),
           "--log-format", "json", "--log-interval", "1", "--no-save", "--disable-validation",
           "--num-workers", "0", "--seed", "1"]  # fmt: skip
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    output, logs, cpu = [], [], []
    for line in process.stdout:  # fairseq's log handler flushes every line
        output.append(line)
        if LOG_LINE.search(line):
            logs.append(json.loads(LOG_LINE.search(line).group(1)))
            cpu.append(cpu_seconds(process.pid))
    _, status, usage = os.wait4(process.pid, 0)
    log.write_text("".join(output))
    if status:
        raise RuntimeError(f"{' '.join(cmd)} failed: {log}")
    # the first update's wps is 0 (its meter starts with it): timed from the second on
    wall = [float(r["wpb"]) / float(r["wps"]) for r in logs[1:]]
    return {"loss": [float(r["loss"]) for r in logs], "step_seconds": wall,
            "step_cpu_seconds": [b - a for a, b in zip(cpu, cpu[1:])], "peak_rss_bytes": usage.ru_maxrss * 1024,
            "cpu_seconds": usage.ru_utime + usage.ru_stime}  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def planned_bytes(arch: str) -> dict:
    """The memory plan for one process, bf16, one sequence of 2048 tokens, no dropout (the presets' default,
    as trained here; no DDP buckets)."""
    p = memory_plan.plan(arch, "bf16", "c10d", 1, 1, SEQ_LEN, False, False)
    return {name: n for name, n in p.bytes.items() if name not in ("ddp_buckets", "fsdp_gathered")}


def measure_125m(data_bin: Path, workdir: Path, user_dir: Path, rounds: int, updates: int) -> dict:
    """``rounds`` runs of each model of ``updates`` updates, alternating (the first model changes each round)."""
    data = gpt2_sized_data(data_bin, workdir / "data_gpt2_vocab")
    runs = {name: [] for name in ARCHS}
    for r in range(rounds):
        for name in (list(ARCHS) if r % 2 == 0 else list(ARCHS)[::-1]):
            runs[name].append(train(ARCHS[name], data, updates, user_dir, workdir / f"{name}_{r + 1}.log"))
            last = runs[name][-1]
            print(f"round {r + 1}/{rounds} {name}: seconds per update, wall {[round(s, 1) for s in last['step_seconds']]}, "
                  f"cpu {[round(s, 1) for s in last['step_cpu_seconds']]}, "
                  f"loss {last['loss'][0]:.2f} -> {last['loss'][-1]:.2f}, "
                  f"peak RSS {last['peak_rss_bytes'] / 2**30:.2f} GiB", flush=True)  # fmt: skip
    return {"seq_len": SEQ_LEN, "batch": 1, "updates_per_run": updates, "runs": runs,
            "planned_bytes": {name: planned_bytes(arch) for name, arch in ARCHS.items()}}  # fmt: skip
