"""The GPU check's stages (scripts/gpu/run.sh, docs/gpu.md), one process each:

    python -m benchmarks.gpu_check STAGE OUT_DIR [--dry-run] [--work DIR]
    python -m benchmarks.gpu_check finish OUT_DIR --finished-stage STAGE --returncode N   # run.sh, after each stage

Each stage writes OUT_DIR/STAGE.json when it starts ("status": "running") and again as its results come in,
so a stage stopped by its time cap keeps what it measured; ``finish`` records how its process ended.
``--dry-run`` (a CPU machine) runs what runs there (imports, tiny fairseq-train runs, the JSON, the MFU
arithmetic with a stated peak) and lists the CUDA-only parts it skipped by name under "skipped".
"""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
STAGES = ("environment", "cuda_tests", "speed_125m", "kernels", "norm_bench")
# Dense fp16 peak of an H100 SXM by its data sheet (989.4 TFLOP/s without sparsity): the dry run's stated peak;
# on a GPU the peak is measured in the same run (a large matmul).
STATED_FP16_PEAK = 989.4e12


# --- the record each stage writes -------------------------------------------------------------------------------

def new_record(stage: str, dry_run: bool) -> dict:
    return {"stage": stage, "dry_run": dry_run, "status": "running",
            "started": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC", "skipped": []}  # fmt: skip


def write_record(out: Path, record: dict):
    path = out / f"{record['stage']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)


def finish(out: Path, stage: str, returncode: int):
    """Record how the stage's process ended: ok (0), timeout (124, 137: its cap), else failed."""
    path = out / f"{stage}.json"
    record = json.loads(path.read_text()) if path.exists() else new_record(stage, None)
    record["returncode"] = returncode
    if returncode != 0 or record["status"] == "running":
        record["status"] = "timeout" if returncode in (124, 137) else ("failed" if returncode else record["status"])
    write_record(out, record)
    print(f"[gpu] {stage}: {record['status']} (exit {returncode})")


# --- the arithmetic ----------------------------------------------------------------------------------------------

def matmul_flops_per_second(size: int, seconds: float) -> float:
    """A size×size by size×size matrix product is size³ multiply-adds, 2·size³ FLOPs."""
    return 2 * size**3 / seconds


def mfu(flops_per_token: float, tokens_per_second: float, peak_flops_per_second: float) -> float:
    """Model FLOPs utilisation: the FLOPs the model's step needs per token (not what the kernels executed:
    no recomputation), times the tokens trained per second, over the device's peak."""
    return flops_per_token * tokens_per_second / peak_flops_per_second


def bandwidth_share(bytes_moved: int, seconds: float, copy_bytes_per_second: float) -> float:
    return bytes_moved / seconds / copy_bytes_per_second


def ratio_summary(ratios: list) -> dict:
    """The median ratio and its distribution-free 95% interval (None below 6 values; benchmarks/report.py)."""
    from .report import median_interval

    interval = median_interval(ratios) if ratios else None
    return {"median": statistics.median(ratios) if ratios else None, "interval_95": interval, "count": len(ratios)}


# --- running fairseq-train ---------------------------------------------------------------------------------------

PEAK_MARKER = "[gpu] peak_cuda_bytes "
# fairseq-train as its console script runs it, printing the run's torch.cuda.max_memory_allocated() at exit: fairseq's
# trainer resets the peak after each update (its gb_free), so the peak before each reset is kept.
TRAIN_WITH_PEAK = (
    "import atexit, sys, torch\n"
    "peak, reset = [0], torch.cuda.reset_peak_memory_stats\n"
    "def tracking_reset(*args, **kwargs):\n"
    "    peak[0] = max(peak[0], torch.cuda.max_memory_allocated())\n"
    "    reset(*args, **kwargs)\n"
    "torch.cuda.reset_peak_memory_stats = tracking_reset\n"
    "def report():\n"
    "    if torch.cuda.is_available():\n"
    "        print('" + PEAK_MARKER + "' + str(max(peak[0], torch.cuda.max_memory_allocated())), flush=True)\n"
    "atexit.register(report)\n"
    "sys.argv[0] = 'fairseq-train'\n"
    "from fairseq_cli.train import cli_main\n"
    "cli_main()\n"
)  # fmt: skip


def fairseq_train(args: list, log: Path, timeout: float = None) -> dict:
    """One fairseq-train process (its output in ``log``): {"train": its train_inner records, "valid": its valid
    records, "peak_cuda_bytes", "returncode"}; the caller passes --log-format json."""
    from fairseq_normformer.analysis.training_log import read_training_log

    cmd = [sys.executable, "-c", TRAIN_WITH_PEAK, *map(str, args)]
    with open(log, "w") as f:
        try:
            returncode = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, cwd=REPO_ROOT).returncode
        except subprocess.TimeoutExpired:
            returncode = "timeout"
    parsed = read_training_log(log)
    peaks = [int(line[len(PEAK_MARKER):]) for line in log.read_text().splitlines() if line.startswith(PEAK_MARKER)]
    return {"train": parsed.train, "valid": parsed.valid, "peak_cuda_bytes": peaks[-1] if peaks else None,
            "returncode": returncode}  # fmt: skip


def device_flags(dry_run: bool) -> list:
    return ["--cpu"] if dry_run else ["--fp16"]


# --- stage a: environment ----------------------------------------------------------------------------------------

# Run in a fresh process: the fixes' targets are looked at before the plugin applies the fixes (its package is
# stood in for by an empty one, so that importing fairseq_normformer.fixes does not apply them).
FIX_PROBE = """
import importlib, json, sys, types
import fairseq
deferred = [name for name in ("sklearn", "sklearn.metrics", "scipy.stats") if name in sys.modules]
hook = any(type(finder).__name__ == "ChangingFinder" for finder in sys.meta_path)
package = types.ModuleType("fairseq_normformer")
package.__path__ = [sys.argv[1]]
sys.modules["fairseq_normformer"] = package
fixes = importlib.import_module("fairseq_normformer.fixes")
report = {name: {"replaces": fix.replaces(),
                 "missing_targets": [s for s, (o, a, _) in zip(fix.replaces(), fix.replacements) if not hasattr(o, a)]}
          for name, fix in fixes.FIXES.items()}
fixes.apply()
for name, fix in fixes.FIXES.items():
    report[name]["installed"] = all(getattr(o, a) is r for o, a, r in fix.replacements)
print(json.dumps({"startup_hook_installed": hook, "deferred_modules_loaded_at_start": deferred, "fixes": report}))
"""


def fix_report() -> dict:
    """Each fix's fairseq/torch targets: present before it is applied (else it replaces nothing), installed after."""
    cmd = [sys.executable, "-c", FIX_PROBE, str(REPO_ROOT / "fairseq_normformer")]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
    if result.returncode != 0:
        return {"error": result.stderr[-3000:]}
    report = json.loads(result.stdout.strip().splitlines()[-1])
    report["not_matching"] = [name for name, fix in report["fixes"].items()
                              if fix["missing_targets"] or not fix["installed"]]  # fmt: skip
    return report


def gpu_description() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip()  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        driver = None
    return {"name": props.name, "memory_bytes": props.total_memory, "capability": list(torch.cuda.get_device_capability()),
            "multiprocessors": props.multi_processor_count, "driver": driver, "count": torch.cuda.device_count()}  # fmt: skip


def versions() -> dict:
    import numpy
    import torch
    import triton

    import fairseq

    return {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "triton": triton.__version__, "fairseq": fairseq.__version__,
            "numpy": numpy.__version__}  # fmt: skip


def tiny_corpus(work: Path):
    """The tests' tiny corpus (200,000 characters of docstrings, 1000 pieces), built once per work folder."""
    from fairseq_normformer.corpus.stdlib import build_corpus

    return build_corpus(work / "tiny_lm", fmt="lm", vocab_size=1000, max_chars=200_000)


def bench_corpus(work: Path):
    """The corpus ``python -m benchmarks measure --workdir WORK/bench`` builds (2,000,000 characters, 8000 pieces)."""
    from fairseq_normformer.corpus.stdlib import build_corpus

    return build_corpus(work / "bench" / "corpus", fmt="lm", vocab_size=8000, max_chars=2_000_000)


def tiny_lm_args(data_bin: Path, updates: int, save_dir: Path) -> list:
    """--no-save, but fairseq-train still creates the --save-dir (its default: ./checkpoints)."""
    return [data_bin, "--user-dir", REPO_ROOT / "fairseq_normformer", "--task", "language_modeling",
            "--arch", "normformer_lm", "--scale-attn", "--scale-fc", "--scale-heads", "--decoder-layers", "2",
            "--decoder-embed-dim", "64", "--decoder-ffn-embed-dim", "256", "--decoder-attention-heads", "4",
            "--tokens-per-sample", "64", "--batch-size", "16", "--optimizer", "adam", "--lr", "3e-3",
            "--max-update", updates, "--log-format", "json", "--log-interval", "1", "--no-save",
            "--disable-validation", "--num-workers", "0", "--seed", "1", "--save-dir", save_dir]  # fmt: skip


def environment(out: Path, work: Path, record: dict, dry_run: bool):
    import torch

    record["versions"] = versions()
    if torch.cuda.is_available():
        record["gpu"] = gpu_description()
    else:
        record["skipped"].append("gpu: no CUDA device")
    write_record(out, record)
    record["fix_targets"] = fix_report()
    write_record(out, record)
    updates = 3 if dry_run else 10
    args = tiny_lm_args(tiny_corpus(work).data_bin, updates, work / "checkpoints") + device_flags(dry_run)
    run = fairseq_train(args, out / "environment_train.log")
    losses = [r["loss"] for r in run["train"]]
    record["tiny_train"] = {"device": "cpu" if dry_run else "cuda (--fp16)", "losses": losses,
                            "returncode": run["returncode"]}  # fmt: skip
    fixes_ok = "error" not in record["fix_targets"] and not record["fix_targets"]["not_matching"]
    record["ok"] = fixes_ok and run["returncode"] == 0 and len(losses) == updates and losses[-1] < losses[0]


# --- stage b: the CUDA tests -------------------------------------------------------------------------------------

def junit_summary(xml_path: Path) -> dict:
    """Counts and the failed tests (name, message) of a pytest junit XML file."""
    import xml.etree.ElementTree as ET

    root = ET.parse(xml_path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    failed = []
    for case in root.iter("testcase"):
        for problem in list(case.findall("failure")) + list(case.findall("error")):
            failed.append({"test": f"{case.get('classname')}::{case.get('name')}",
                           "message": (problem.get("message") or "")[:2000]})  # fmt: skip
    return {**counts, "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
            "failed": failed}  # fmt: skip


def run_interruptibly(cmd: list, log: Path, seconds: float) -> int:
    """Run ``cmd`` (output to ``log``); past ``seconds``, interrupt it as Ctrl-C does, so that pytest writes the
    report of the tests run so far, then kill it 30 s later."""
    import signal

    with open(log, "w") as f:
        process = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        try:
            return process.wait(timeout=None if math.isinf(seconds) else seconds)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
            try:
                return process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                return process.wait()


def cuda_tests(out: Path, work: Path, record: dict, dry_run: bool, seconds: float):
    import importlib.util

    xml = out / "cuda_tests.xml"
    workers = ["-n", "6"] if importlib.util.find_spec("xdist") and not dry_run else []
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "tests/cuda", "-q", "-p", "no:cacheprovider", "-rfEs",
           f"--junitxml={xml}", f"--basetemp={work / 'pytest'}", *workers]  # fmt: skip
    record["command"] = " ".join(cmd[1:])
    write_record(out, record)
    record["returncode"] = run_interruptibly(cmd, out / "cuda_tests_pytest.log", seconds)
    record["results"] = junit_summary(xml)
    if dry_run:
        record["skipped"].append(f"the {record['results']['skipped']} CUDA tests: no CUDA device (collected, skipped)")


# --- stage c: the paper's 125M at 2048 tokens, fp16, as fairseq-train runs it -------------------------------------

SPEED_VARIANTS = {  # name: (label, --arch, the model's flags, the kernels' flags)
    "preln": ("Pre-LN", "preln_lm_gpt3_small", [], ["--layernorm-impl", "torch"]),
    "normformer": ("NormFormer, torch path", "normformer_lm_gpt3_small", [], ["--layernorm-impl", "torch"]),
    "normformer_triton": ("NormFormer, Triton kernels", "normformer_lm_gpt3_small", [], ["--layernorm-impl", "triton"]),
    "normformer_compile": ("NormFormer, --ffn-norm-impl compile", "normformer_lm_gpt3_small", [],
                           ["--layernorm-impl", "torch", "--ffn-norm-impl", "compile"]),
    "sandwich": ("sandwich norm", "preln_lm_gpt3_small", ["--sandwich-norm"], ["--layernorm-impl", "torch"]),
}  # fmt: skip
SEQ_LEN = 2048
SPEED_BATCH = 8  # sequences of 2048 tokens a step: 16,384 tokens
SPEED_UPDATES = 25  # a run; the first WARMUP_UPDATES are not timed
WARMUP_UPDATES = 5
SPEED_ROUNDS = 2
MATMUL_SIZE = 8192
# the dry run: the presets made tiny (fairseq's command line overrides a preset's sizes), one timed update
DRY_RUN_SHAPE = ["--decoder-layers", "2", "--decoder-embed-dim", "64", "--decoder-ffn-embed-dim", "256",
                 "--decoder-attention-heads", "4"]  # fmt: skip
TARGETS = {"step_time_over_preln": 1.02, "mfu": 0.40, "peak_over_plan": 0.10, "triton_share_of_copy": 0.80}  # issue 48


def speed_args(arch: str, flags: list, data: Path, batch: int, updates: int, dry_run: bool, save_dir: Path) -> list:
    from fairseq_normformer import paper

    return [data, "--user-dir", REPO_ROOT / "fairseq_normformer", "--task", "language_modeling", "--arch", arch,
            *flags, "--tokens-per-sample", SEQ_LEN, "--sample-break-mode", "none", "--batch-size", batch,
            *device_flags(dry_run), *paper.optimizer_args(), "--lr", "6e-4", "--max-update", updates,
            "--log-format", "json", "--log-interval", "1", "--no-save", "--save-dir", save_dir, "--disable-validation",
            "--num-workers", "2", "--seed", "1"]  # fmt: skip


def step_seconds(train_records: list, warmup: int) -> list:
    """Seconds of each update after the warm-up, from fairseq's log: words per batch over words per second."""
    return [r["wpb"] / r["wps"] for r in train_records[warmup:] if r.get("wps")]


def vocab_size(data: Path) -> int:
    """The dictionary's symbols: dict.txt's lines and fairseq's 4 specials."""
    return len((data / "dict.txt").read_text().splitlines()) + 4


def model_flops_per_token(arch: str, model_flags: list, batch: int, vocab: int) -> int:
    """FLOPs of one training step per token, counted by torch on the meta device (``normformer-paper-settings
    --trace``'s machinery, fairseq_normformer/meta_trace.py), with the variant's own flags."""
    from fairseq_normformer import meta_trace

    step = meta_trace.lm_step(arch, batch, SEQ_LEN, 0.0, False, vocab, model_flags)
    return step.flops // (batch * SEQ_LEN)


def planned_peak_bytes(arch: str, batch: int) -> dict:
    """The memory plan for one process, --fp16, ``batch`` sequences of 2048 tokens, no dropout (the presets')."""
    from fairseq_normformer import memory_plan

    p = memory_plan.plan(arch, "fp16", "c10d", 1, batch, SEQ_LEN, False, False)
    parts = {name: n for name, n in p.bytes.items() if name not in ("ddp_buckets", "fsdp_gathered")}
    return {"parts": parts, "total": sum(parts.values())}


def measured_peak(dry_run: bool, repeats: int = 5) -> dict:
    """The dense fp16 matmul peak measured here (the best of ``repeats``), or the dry run's stated one."""
    if dry_run:
        return {"flops_per_second": STATED_FP16_PEAK, "source": "stated: H100 SXM data sheet, dense fp16 (dry run)"}
    import torch

    from .measure import matmul_peak

    seconds = min(r["wall"] for r in matmul_peak(MATMUL_SIZE, repeats, "cuda", torch.float16)["seconds"])
    return {"flops_per_second": matmul_flops_per_second(MATMUL_SIZE, seconds),
            "source": f"measured: {MATMUL_SIZE}³ fp16 matmul, best of {repeats}"}  # fmt: skip


def speed_summary(runs: dict, flops: dict, peak: float, planned: dict) -> dict:
    """Per variant: tokens/s (median over its timed updates), the step-time ratio to Pre-LN (update i of a run
    over update i of Pre-LN's run in the same round) with its interval, MFU, the peak CUDA memory over the plan."""
    summary = {}
    for name, rounds in runs.items():
        steps = [s for r in rounds for s in r["step_seconds"]]
        ratios = [a / b for mine, base in zip(rounds, runs["preln"]) for a, b in zip(mine["step_seconds"], base["step_seconds"])]
        tokens = statistics.median(r["tokens_per_step"] for r in rounds) if rounds else None
        tps = tokens / statistics.median(steps) if steps else None
        peaks = [r["peak_cuda_bytes"] for r in rounds if r["peak_cuda_bytes"]]
        summary[name] = {"tokens_per_second": tps, "step_time_over_preln": ratio_summary(ratios),
                         "mfu": mfu(flops[name], tps, peak) if tps else None,
                         "peak_over_plan": max(peaks) / planned[name]["total"] if peaks else None}  # fmt: skip
    return summary


def judged(summary: dict) -> dict:
    """Issue 48's targets at 125M: NormFormer with the Triton kernels within 2% of Pre-LN's step time (the
    whole interval at or below), every variant at 40% MFU or more, peak memory within 10% of the plan;
    None where not measured."""
    triton = summary.get("normformer_triton", {}).get("step_time_over_preln", {})
    interval = triton.get("interval_95")
    verdicts = {"normformer_triton_step_time": None if not interval else interval[1] <= TARGETS["step_time_over_preln"]}
    for name, s in summary.items():
        verdicts[f"{name}_mfu"] = None if s["mfu"] is None else s["mfu"] >= TARGETS["mfu"]
        ratio = s["peak_over_plan"]
        verdicts[f"{name}_memory"] = None if ratio is None else abs(ratio - 1) <= TARGETS["peak_over_plan"]
    return verdicts


def speed_125m(out: Path, work: Path, record: dict, dry_run: bool):
    from .paper_125m import gpt2_sized_data

    batch, updates, rounds, warmup = (1, 3, 1, 1) if dry_run else (SPEED_BATCH, SPEED_UPDATES, SPEED_ROUNDS, WARMUP_UPDATES)
    names = ["preln", "normformer"] if dry_run else list(SPEED_VARIANTS)
    shape = DRY_RUN_SHAPE if dry_run else []
    if dry_run:
        record["skipped"] += ["Triton and compile variants, sandwich, the measured matmul peak, peak CUDA memory: "
                              "CUDA only", "the 125M: tiny presets on the CPU, batch 1, one round, fp32"]  # fmt: skip
    record["setup"] = {"seq_len": SEQ_LEN, "batch": batch, "updates_per_run": updates, "warmup_updates": warmup,
                       "rounds": rounds, "precision": "cpu fp32" if dry_run else "fp16", "shape_flags": shape}  # fmt: skip
    record["peak"] = measured_peak(dry_run)
    record["variants"] = {n: {"label": v[0], "arch": v[1], "flags": v[2] + v[3]} for n, v in SPEED_VARIANTS.items() if n in names}
    # the benchmarks' corpus (python -m benchmarks measure builds the same: ~30 updates an epoch) with GPT-2's
    # vocabulary; the dry run: the tiny corpus's own 1000 pieces (a GPT-2-sized output layer takes seconds on a CPU)
    data = tiny_corpus(work).data_bin if dry_run else gpt2_sized_data(bench_corpus(work).data_bin, work / "data_gpt2_vocab")
    record["setup"]["vocab"] = vocab = vocab_size(data)
    record["flops_per_token"] = {n: model_flops_per_token(SPEED_VARIANTS[n][1], shape + SPEED_VARIANTS[n][2], batch, vocab)
                                 for n in names}  # fmt: skip
    record["planned_bytes"] = {n: planned_peak_bytes(SPEED_VARIANTS[n][1], batch) for n in names}
    write_record(out, record)
    runs = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            _, arch, model_flags, kernel_flags = SPEED_VARIANTS[name]
            args = speed_args(arch, shape + model_flags + kernel_flags, data, batch, updates, dry_run, work / "checkpoints")
            run = fairseq_train(args, out / f"speed_125m_{name}_{r + 1}.log")
            runs[name].append({"step_seconds": step_seconds(run["train"], warmup), "loss": [x["loss"] for x in run["train"]],
                               "tokens_per_step": batch * SEQ_LEN, "peak_cuda_bytes": run["peak_cuda_bytes"],
                               "returncode": run["returncode"]})  # fmt: skip
            record["runs"] = runs
            write_record(out, record)
    record["summary"] = speed_summary(runs, record["flops_per_token"], record["peak"]["flops_per_second"],
                                      record["planned_bytes"])
    record["targets"] = {"bounds": TARGETS, "met": judged(record["summary"])}


# --- stage c': python -m benchmarks measure --device cuda, and the LN kernels' bandwidth -----------------------------

def kernel_bandwidths(rows: list) -> list:
    """Each Triton LN timing (benchmarks/measure.py's layer_norm_kernels, which times a copy of the same tensor in
    the same run): bytes moved (forward reads x, writes y; forward+backward also reads x and dy and writes dx),
    GB/s of Triton, torch and the copy, and Triton's share of the copy's bandwidth."""
    result = []
    for row in rows:
        element = 2  # fp16 and bf16
        tensor = row["rows"] * row["width"] * element
        moved = 2 * tensor if row["pass"] == "forward" else 5 * tensor
        copy_bps = 2 * tensor / (row["copy_ms"] / 1e3)  # a copy reads and writes the tensor once
        result.append({**{k: row[k] for k in ("dtype", "width", "pass")}, "bytes": moved,
                       "triton_gbps": moved / row["triton_ms"] / 1e6, "torch_gbps": moved / row["torch_ms"] / 1e6,
                       "copy_gbps": copy_bps / 1e9,
                       "triton_share_of_copy": bandwidth_share(moved, row["triton_ms"] / 1e3, copy_bps),
                       "triton_over_torch_speed": row["torch_ms"] / row["triton_ms"]})  # fmt: skip
    return result


def kernels(out: Path, work: Path, record: dict, dry_run: bool):
    if dry_run:
        record["skipped"].append("python -m benchmarks measure --device cuda and the LN kernels' bandwidth: CUDA only")
        return
    results_dir = out / "benchmarks"
    doc = results_dir / "benchmarks.md"
    results_dir.mkdir(exist_ok=True)
    doc.write_text((REPO_ROOT / "docs" / "benchmarks.md").read_text())
    cmd = [sys.executable, "-m", "benchmarks", "--results-dir", str(results_dir), "--doc", str(doc), "measure",
           "--device", "cuda", "--rounds", "3", "--eval-lm-rounds", "0", "--workdir", str(work / "bench")]  # fmt: skip
    record["command"] = " ".join(cmd[1:])
    write_record(out, record)
    with open(out / "kernels_measure.log", "w") as f:
        record["returncode"] = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO_ROOT).returncode
    measured = json.loads((results_dir / "cuda.json").read_text())
    record["layer_norm_bandwidth"] = bandwidths = kernel_bandwidths(measured["layer_norm_kernels"])
    wide = [b for b in bandwidths if b["width"] >= 1024]
    share = TARGETS["triton_share_of_copy"]
    record["targets"] = {"triton_at_least_torch": all(b["triton_over_torch_speed"] >= 1 for b in bandwidths),
                         "triton_share_of_copy_at_width_1024_up": all(b["triton_share_of_copy"] >= share for b in wide)}


# --- stage d: the normalization bench's small shape at GPU speed ---------------------------------------------------

NORM_BENCH = {  # name: (label, flags, best LR of docs/results/small/norm_bench)
    "preln": ("Pre-LN", [], "3e-3"),
    "normformer": ("NormFormer", ["--scale-attn", "--scale-fc", "--scale-heads"], "6e-3"),
    "sandwich": ("sandwich norm", ["--sandwich-norm"], "6e-3"),
}
NORM_BENCH_UPDATES = 3000  # 10x the CPU runs' 300
SMALL_SHAPE = ["--decoder-layers", "4", "--decoder-embed-dim", "256", "--decoder-ffn-embed-dim", "1024",
               "--decoder-attention-heads", "4", "--share-decoder-input-output-embed"]  # fmt: skip


def norm_bench_args(data_bin: Path, flags: list, lr: str, updates: int, save_dir: Path, dry_run: bool) -> list:
    """recipes/norm_bench.sh's small runs (docs/results/small/norm_bench/commands.sh), warm-up and validation
    scaled with the updates, on the GPU in fp32 as on the CPU."""
    from fairseq_normformer import paper

    every = updates // 10 if updates >= 10 else updates  # the dry run's few updates: validated once, at the end
    return [data_bin, "--user-dir", REPO_ROOT / "fairseq_normformer", "--task", "language_modeling",
            "--sample-break-mode", "none", "--tokens-per-sample", "128", "--batch-size", "16", *paper.optimizer_args(),
            "--lr-scheduler", "polynomial_decay", "--warmup-updates", every, "--total-num-update", updates,
            "--max-update", updates, "--dropout", "0.1", "--attention-dropout", "0.1", "--validate-interval-updates",
            every, "--validate-interval", "1000", "--no-save", "--save-dir", save_dir, "--num-workers", "0", "--log-format",
            "json", "--log-interval", every, "--arch", "normformer_lm", *SMALL_SHAPE, *flags, "--lr", lr,
            "--seed", "1", *(["--cpu"] if dry_run else [])]  # fmt: skip


def norm_bench(out: Path, work: Path, record: dict, dry_run: bool, seconds_left: float):
    from concurrent.futures import ThreadPoolExecutor

    from fairseq_normformer.corpus.stdlib import build_corpus

    updates = 4 if dry_run else NORM_BENCH_UPDATES
    if dry_run:
        record["skipped"].append(f"{NORM_BENCH_UPDATES} updates on the GPU: {updates} on the CPU, the tiny corpus")
    corpus = tiny_corpus(work) if dry_run else build_corpus(work / "stdlib_v2000", fmt="lm", vocab_size=2000)
    record["corpus"] = "tiny (200,000 characters, 1000 pieces)" if dry_run else "standard-library docstrings, 2000 pieces"
    record["updates"] = updates
    write_record(out, record)

    def train(name):  # the three at once: each is small next to the GPU, and Python's time per update dominates
        label, flags, lr = NORM_BENCH[name]
        run = fairseq_train(norm_bench_args(corpus.data_bin, flags, lr, updates, work / f"nb_{name}", dry_run),
                            out / f"norm_bench_{name}.log", timeout=seconds_left)  # fmt: skip
        return name, {"label": label, "lr": lr, "returncode": run["returncode"],
                      "valid": [{"update": v.get("num_updates"), "ppl": v.get("ppl")} for v in run["valid"]]}  # fmt: skip

    with ThreadPoolExecutor(len(NORM_BENCH)) as pool:
        record["schemes"] = dict(pool.map(train, NORM_BENCH))


# --- the command line ----------------------------------------------------------------------------------------------

def run_stage(stage: str, out: Path, work: Path, dry_run: bool, seconds: float):
    record = new_record(stage, dry_run)
    write_record(out, record)
    try:
        if stage in ("norm_bench", "cuda_tests"):
            {"norm_bench": norm_bench, "cuda_tests": cuda_tests}[stage](out, work, record, dry_run, seconds)
        else:
            {"environment": environment, "speed_125m": speed_125m, "kernels": kernels}[stage](
                out, work, record, dry_run)
        record["status"] = "ok"
    except Exception as e:  # recorded, and the process fails: run.sh goes on with the next stage
        record["status"], record["error"] = "failed", f"{type(e).__name__}: {e}"
        raise
    finally:
        record["finished"] = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC"
        write_record(out, record)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=[*STAGES, "finish"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--finished-stage", choices=STAGES, help="finish: the stage whose process ended")
    parser.add_argument("--returncode", type=int, help="finish: its exit status")
    parser.add_argument("--dry-run", action="store_true", help="on a CPU machine: the plumbing, CUDA parts skipped")
    parser.add_argument("--work", type=Path, default=REPO_ROOT / "work" / "gpu", help="corpora and checkpoints")
    parser.add_argument("--seconds", type=float, default=math.inf,
                        help="cuda_tests, norm_bench: the time their tests or runs may take (then stopped)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.stage == "finish":
        finish(args.out, args.finished_stage, args.returncode)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    run_stage(args.stage, args.out, args.work, args.dry_run, args.seconds)


if __name__ == "__main__":
    main()
