"""Speed and memory of NormFormer against the baselines (issue #4). A benchmark, not a test.

    python benchmarks/bench_lm.py                 # CPU: 6 layers, 512 dim, sequence 256, batch 8
    python benchmarks/bench_lm.py --device cuda   # GPU: the 125M (GPT-3 Small) preset, sequence 2048,
                                                  # plus (e) the fused Triton kernels and LN kernel timings

Forward+backward tokens/s and peak memory of
  (a) fairseq's transformer_lm, (b) the same with --scale-attn --scale-fc --scale-heads,
  (c) our Pre-LN baseline, (d) our NormFormer (paper HeadScale), (e) (d) with --layernorm-impl triton,
all built through fairseq's argparse parser in this one process, timed interleaved (the order rotates
every round) and reported as the median over rounds; profiles and formulas that explain the
differences. Then fairseq-eval-lm throughput of (a)-(d) on a standard-library docstring corpus.
Results go into docs/benchmarks.md between this device's markers; the rest of the file is left as it
is. See docs/benchmarks.md for the method.
"""
import argparse
import datetime
import logging
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import fairseq
import torch
import torch.nn.functional as F
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq_cli import eval_lm
from torch.profiler import ProfilerActivity, profile

import fairseq_normformer
from fairseq_normformer.corpus.stdlib import build_corpus

REPO_ROOT = Path(__file__).resolve().parent.parent
USER_DIR = REPO_ROOT / "fairseq_normformer"
MiB = 2**20
NORMFORMER_FLAGS = ["--scale-attn", "--scale-fc", "--scale-heads"]


@dataclass
class Variant:
    key: str
    label: str
    flags: list = field(default_factory=list)
    ours: bool = False
    cuda_only: bool = False


VARIANTS = [
    Variant("a", "fairseq transformer_lm (Pre-LN)"),
    Variant("b", "fairseq transformer_lm + --scale-attn --scale-fc --scale-heads", NORMFORMER_FLAGS),
    Variant("c", "ours, Pre-LN baseline", ["--layernorm-impl", "torch"], ours=True),
    Variant("d", "ours, NormFormer (paper HeadScale)", NORMFORMER_FLAGS + ["--layernorm-impl", "torch"], ours=True),
    Variant("e", "ours, NormFormer, fused Triton kernels", NORMFORMER_FLAGS + ["--layernorm-impl", "triton"],
            ours=True, cuda_only=True),
]


@dataclass
class Setup:
    archs: dict  # "fairseq" / "ours" -> --arch
    shape_flags: list
    seq_len: int
    batch: int
    dtype: torch.dtype
    steps_per_timing: int

    def arch(self, variant: Variant) -> str:
        return self.archs["ours" if variant.ours else "fairseq"]


SETUPS = {
    "cpu": Setup(
        archs={"fairseq": "transformer_lm", "ours": "normformer_lm"},
        shape_flags=["--decoder-layers", "6", "--decoder-embed-dim", "512", "--decoder-ffn-embed-dim", "2048",
                     "--decoder-attention-heads", "8", "--activation-fn", "gelu",
                     "--share-decoder-input-output-embed"],
        seq_len=256, batch=8, dtype=torch.float32, steps_per_timing=1,
    ),
    "cuda": Setup(
        archs={"fairseq": "transformer_lm_gpt3_small", "ours": "preln_lm_gpt3_small"},
        shape_flags=[], seq_len=2048, batch=8, dtype=torch.bfloat16, steps_per_timing=5,
    ),
}  # fmt: skip


# ------------------------------------------------------------------ models, built as fairseq does
def parse_training_args(data_dir: Path, arch: str, flags: list, seq_len: int):
    parser = options.get_training_parser()
    argv = [str(data_dir), "--task", "language_modeling", "--arch", arch, "--tokens-per-sample", str(seq_len)]
    return options.parse_args_and_arch(parser, argv + flags)


def build_model(variant: Variant, setup: Setup, data_dir: Path):
    """fairseq's model from the argparse Namespace (the one path on which its --scale-* flags take
    effect); ours through omegaconf, exactly as fairseq-train builds it."""
    args = parse_training_args(data_dir, setup.arch(variant), setup.shape_flags + variant.flags, setup.seq_len)
    task = tasks.setup_task(args)
    model = task.build_model(convert_namespace_to_omegaconf(args).model if variant.ours else args)
    _check_operations(variant, model)
    return model


def _check_operations(variant: Variant, model):
    """Fail loudly if the NormFormer flags did not reach the layers."""
    names = [name for name, _ in model.named_parameters()]
    has_attn_ln = any(".attn_ln." in name for name in names)
    if has_attn_ln != ("--scale-attn" in variant.flags):
        raise RuntimeError(f"({variant.key}) built {'with' if has_attn_ln else 'without'} Post-Attn LN")


# ------------------------------------------------------------------ one training step, timed
class Step:
    """Forward + cross-entropy + backward of one model on one fixed random batch."""

    def __init__(self, model, setup: Setup, device: str, vocab_size: int, nspecial: int):
        self.model = model.to(device=device, dtype=setup.dtype).train()
        g = torch.Generator().manual_seed(0)
        tokens = torch.randint(nspecial, vocab_size, (setup.batch, setup.seq_len + 1), generator=g)
        self.inputs, self.targets = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
        self.device = device

    def __call__(self):
        self.model.zero_grad(set_to_none=False)
        logits = self.model(self.inputs)[0]  # (B, T, V)
        F.cross_entropy(logits.float().flatten(0, 1), self.targets.flatten()).backward()

    def seconds(self, steps: int) -> dict:
        """Seconds per step by clock: "wall", and on CPU also "cpu", this thread's CPU time (the work
        done, without the time spent waiting for a core on a shared machine)."""
        self._sync()
        wall, cpu = time.perf_counter(), time.thread_time()
        for _ in range(steps):
            self()
        self._sync()
        clocks = {"wall": time.perf_counter() - wall, "cpu": time.thread_time() - cpu}
        return {clock: t / steps for clock, t in clocks.items() if clock == "wall" or self.device == "cpu"}

    def peak_bytes(self) -> int:
        """Peak of tensor memory allocated during one step, above what was live before it."""
        if self.device == "cuda":
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            self()
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - before
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            self()
        return _peak_of_allocation_events(prof)

    def self_time_by_op(self) -> dict:
        """Self time (ms) of each aten op in one step, from torch.profiler."""
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device == "cuda" else [])
        with profile(activities=activities) as prof:
            self()
            self._sync()
        attr = "self_device_time_total" if self.device == "cuda" else "self_cpu_time_total"
        return {e.key: getattr(e, attr) / 1e3 for e in prof.key_averages()}

    def _sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()


def _peak_of_allocation_events(prof) -> int:
    """Max running sum of the CPU allocator's alloc (+bytes) and free (-bytes) events, in time order."""
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def rotations(keys: list, rounds: int):
    """The keys in a different order each round, so no variant always runs first or after another."""
    for r in range(rounds):
        yield r, keys[r % len(keys) :] + keys[: r % len(keys)]


def time_interleaved(steps: dict, setup: Setup, rounds: int) -> dict:
    """{key: {clock: seconds per step}}, median over interleaved rounds."""
    for step in steps.values():  # warm-up: allocator, gradient buffers, kernel compilation
        step.seconds(1)
    times = {key: [] for key in steps}
    for r, order in rotations(list(steps), rounds):
        for key in order:
            times[key].append(steps[key].seconds(setup.steps_per_timing))
        report = ", ".join(f"{k} " + " ".join(f"{c} {s:.2f}s" for c, s in t[-1].items()) for k, t in times.items())
        print(f"round {r + 1}/{rounds}, seconds per step by clock: {report}", flush=True)
    return {key: {clock: statistics.median(t[clock] for t in ts) for clock in ts[0]} for key, ts in times.items()}


def profile_interleaved(steps: dict, rounds: int = 3) -> dict:
    """{key: {op: self ms}} for (b), (c), (d), the least over interleaved rounds (the least disturbed)."""
    profiles = {key: {} for key in ("b", "c", "d")}
    for _, order in rotations(list(profiles), rounds):
        for key in order:
            for op, ms in steps[key].self_time_by_op().items():
                profiles[key][op] = min(ms, profiles[key].get(op, ms))
    return profiles


# ------------------------------------------------------------------ fairseq-eval-lm throughput
def train_one_update(variant: Variant, setup: Setup, data_dir: Path, save_dir: Path, device: str) -> Path:
    """A checkpoint of ``variant`` written by fairseq-train itself (one update)."""
    cmd = [str(Path(sys.executable).parent / "fairseq-train")] + [str(a) for a in [
        data_dir, "--user-dir", USER_DIR, "--task", "language_modeling", "--arch", setup.arch(variant),
        *setup.shape_flags, *variant.flags, "--tokens-per-sample", setup.seq_len, "--max-tokens", 2048,
        "--max-update", 1, "--optimizer", "adam", "--lr", "1e-4", "--save-dir", save_dir, "--num-workers", 0,
        "--disable-validation", "--no-epoch-checkpoints", *_device_flags(device),
    ]]  # fmt: skip
    result = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return save_dir / "checkpoint_last.pt"


class _EvaluatedLine(logging.Handler):
    """Catches fairseq-eval-lm's "Evaluated N tokens in Xs (Y tokens/s)" log line."""

    PATTERN = re.compile(r"Evaluated ([\d,]+) tokens in [\d.]+s \(([\d.]+) tokens/s\)")

    def __init__(self):
        super().__init__(logging.INFO)
        self.match = None

    def emit(self, record):
        self.match = self.PATTERN.search(record.getMessage()) or self.match


def eval_lm_tokens_per_second(checkpoint: Path, data_dir: Path, setup: Setup, device: str) -> dict:
    """fairseq-eval-lm's main, run in this process as its console script runs it. {"wall": the tokens/s
    it reports (its own stopwatch), "cpu": tokens per CPU second of this thread over the whole run}."""
    argv = [str(a) for a in [
        data_dir, "--path", checkpoint, "--gen-subset", "valid", "--tokens-per-sample", setup.seq_len,
        "--max-tokens", setup.seq_len * setup.batch, "--num-workers", 0, *_device_flags(device),
    ]]  # fmt: skip
    args = options.parse_args_and_arch(options.get_eval_lm_parser(), argv)
    catcher, logger = _EvaluatedLine(), logging.getLogger(eval_lm.__name__)
    logger.addHandler(catcher)
    logger.setLevel(logging.INFO)
    try:
        cpu = time.thread_time()
        eval_lm.main(convert_namespace_to_omegaconf(args))
        cpu = time.thread_time() - cpu
    finally:
        logger.removeHandler(catcher)
    tokens = int(catcher.match.group(1).replace(",", ""))
    speeds = {"wall": float(catcher.match.group(2)), "cpu": tokens / cpu}
    return {clock: speed for clock, speed in speeds.items() if clock == "wall" or device == "cpu"}


def _device_flags(device: str) -> list:
    return ["--cpu"] if device == "cpu" else ["--fp16"]


def eval_lm_throughput(variants: list, setup: Setup, data_dir: Path, workdir: Path, device: str, rounds: int):
    """{key: {clock: tokens/s}} of fairseq-eval-lm, median over interleaved rounds; and whether
    fairseq-train dropped (b)'s --scale-* flags."""
    checkpoints = {v.key: train_one_update(v, setup, data_dir, workdir / f"ckpt_{v.key}", device) for v in variants}
    runs = {key: [] for key in checkpoints}
    for r, order in rotations(list(checkpoints), rounds):
        for key in order:
            runs[key].append(eval_lm_tokens_per_second(checkpoints[key], data_dir, setup, device))
        print(f"eval-lm round {r + 1}/{rounds} (tokens/s): {runs}", flush=True)
    medians = {key: {clock: statistics.median(run[clock] for run in rs) for clock in rs[0]} for key, rs in runs.items()}
    return medians, _fairseq_train_drops_scale_flags(checkpoints)


def _fairseq_train_drops_scale_flags(checkpoints: dict) -> bool:
    """True when fairseq-train's checkpoint of (b) has no NormFormer parameters (flags lost on its path)."""
    if "b" not in checkpoints:
        return False
    state = torch.load(checkpoints["b"], map_location="cpu", weights_only=False)
    return not any(".attn_ln." in name for name in state["model"])


# ------------------------------------------------------------------ Triton LayerNorm vs torch (CUDA)
KERNEL_WIDTHS = (768, 1024, 3072, 4096)


def layer_norm_kernel_timings(rows: int = 16384) -> list:
    """(dtype, width, pass, torch ms, triton ms) from triton.testing.do_bench (median of its runs)."""
    from triton.testing import do_bench

    from fairseq_normformer.kernels.triton_layer_norm import layer_norm

    results = []
    for dtype in (torch.float16, torch.bfloat16):
        for width in KERNEL_WIDTHS:
            x = torch.randn(rows, width, device="cuda", dtype=dtype, requires_grad=True)
            w = torch.randn(width, device="cuda", dtype=dtype, requires_grad=True)
            b = torch.randn(width, device="cuda", dtype=dtype, requires_grad=True)
            dy = torch.randn_like(x)
            impls = {"torch": lambda: F.layer_norm(x, (width,), w, b), "triton": lambda: layer_norm(x, w, b)}
            passes = {"forward": lambda f: f(), "fwd+bwd": lambda f: torch.autograd.grad(f(), (x, w, b), dy)}
            for name, run in passes.items():
                ms = {impl: do_bench(lambda: run(fn)) for impl, fn in impls.items()}
                results.append((str(dtype).removeprefix("torch."), width, name, ms["torch"], ms["triton"]))
    return results


# ------------------------------------------------------------------ the report
@dataclass
class Results:
    device: str
    setup: Setup
    rounds: int
    params: dict  # key -> parameter count
    seconds: dict  # key -> {clock: seconds per step}
    peak: dict  # key -> bytes
    profiles: dict  # "c"/"d" -> {op: self ms}
    eval_lm: dict = None  # key -> {clock: tokens/s}
    fairseq_train_drops_flags: bool = False
    kernel_rows: list = field(default_factory=list)
    normformer_shapes: dict = field(default_factory=dict)  # layers, tokens, embed, ffn

    @property
    def clock(self) -> str:
        """The clock the targets are judged on: CPU time on a (shared) CPU machine, else wall time."""
        return "cpu" if self.device == "cpu" else "wall"

    def tokens_per_second(self, key: str, clock: str = None) -> float:
        return self.setup.batch * self.setup.seq_len / self.seconds[key][clock or self.clock]


# ------------------------------------------------------------------ what NormFormer adds, by formula
def normformer_shapes(model, setup: Setup) -> dict:
    layer = model.decoder.layers[0]
    return {
        "layers": len(model.decoder.layers),
        "tokens": setup.batch * setup.seq_len,
        "embed": layer.fc1.in_features,
        "ffn": layer.fc1.out_features,
    }


def added_activation_bytes(shapes: dict, bytes_per_value: int = 4) -> int:
    """Activations (d) keeps for backward beyond (c), per layer: the FFN LN's output (FC2's input; the
    GELU output it normalises is kept either way) and the Post-Attn LN's input (the attention output,
    which (c) does not keep); LN statistics and HeadScale (folded into W^O) are negligible."""
    per_layer = shapes["tokens"] * (shapes["ffn"] + shapes["embed"]) * bytes_per_value
    return shapes["layers"] * per_layer


def share(profile: dict, ops: tuple) -> float:
    """The fraction of a profile's op time spent in ``ops``."""
    return sum(ms for op, ms in profile.items() if op in ops) / sum(profile.values())


LAYER_NORM_OPS = ("aten::native_layer_norm", "aten::native_layer_norm_backward")
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm")


def explanation(res: Results) -> list:
    """Numbers that explain the differences: LayerNorm's and the matrix multiplies' share of each
    profile, and the activation memory NormFormer's LayerNorms keep, by formula."""
    c, d = res.profiles["c"], res.profiles["d"]
    ln_c, ln_d = (sum(p.get(op, 0) for op in LAYER_NORM_OPS) for p in (c, d))
    extra = added_activation_bytes(res.normformer_shapes, res.setup.dtype.itemsize)
    ln_shares = ", ".join(f"({key}) {100 * share(p, LAYER_NORM_OPS):.1f}%" for key, p in res.profiles.items())
    matmul_shares = ", ".join(f"({key}) {100 * share(p, MATMUL_OPS):.0f}%" for key, p in res.profiles.items())
    return [
        f"- LayerNorm ops (forward and backward) in the profiles: (c) {ln_c:.0f} ms, (d) {ln_d:.0f} ms a step, "
        f"{ln_d - ln_c:+.0f} ms; all ops: {sum(d.values()) - sum(c.values()):+.0f} ms. "
        f"Share of op time: {ln_shares}.",
        f"- Share of op time in matrix multiplies ({', '.join(MATMUL_OPS)}), the same work in every model: "
        f"{matmul_shares}.",
        f"- Activations (d) keeps for backward beyond (c), by formula (`added_activation_bytes`: the FFN LN's "
        f"output and the Post-Attn LN's input, × {res.normformer_shapes['layers']} layers): {extra / MiB:.0f} MiB "
        f"= {100 * extra / res.peak['c']:.1f}% of (c)'s peak; measured (d) − (c): "
        f"{(res.peak['d'] - res.peak['c']) / MiB:+.0f} MiB.",
    ]


def machine_description(device: str) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    text = f"{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s), {platform.system()}"
    return text + (f"; GPU: {torch.cuda.get_device_name()}" if device == "cuda" else "")


def versions() -> str:
    import triton

    return (
        f"Python {platform.python_version()}, torch {torch.__version__}, fairseq {fairseq.__version__}, "
        f"triton {triton.__version__}, fairseq-normformer {fairseq_normformer.__version__}"
    )


def _target(text: str, measured: str, ok: bool) -> str:
    return f"| {text} | {measured} | {'met' if ok else '**missed**'} |"


def targets_table(res: Results) -> list:
    tps = {key: res.tokens_per_second(key) for key in res.seconds}
    lines = [f"| target (timed by {res.clock} clock) | measured | |", "|---|---|---|"]
    if res.device == "cpu":
        speedup = tps["d"] / tps["b"]
        lines.append(_target("(d) ≥ 1.15× the tokens/s of (b)", f"{speedup:.2f}×", speedup >= 1.15))
        slower = res.seconds["d"][res.clock] / res.seconds["c"][res.clock] - 1
        lines.append(_target("(d) within 2% of (c) in time per step", f"{100 * slower:+.1f}%", slower <= 0.02))
        more = res.peak["d"] / res.peak["c"] - 1
        lines.append(_target("(d) within 3% of (c) in peak memory", f"{100 * more:+.1f}%", more <= 0.03))
        return lines
    slower = res.seconds["e"]["wall"] / res.seconds["c"]["wall"] - 1
    lines.append(_target("(e) within 1% of (c) in time per step", f"{100 * slower:+.1f}%", slower <= 0.01))
    for dtype, width, name, torch_ms, triton_ms in res.kernel_rows:
        text = f"Triton LN at least as fast as torch's, {dtype}, width {width}, {name}"
        lines.append(_target(text, f"{torch_ms / triton_ms:.2f}× torch's speed", triton_ms <= torch_ms))
    return lines


def models_table(res: Results) -> list:
    clocks = list(next(iter(res.seconds.values())))
    head = " | ".join(f"fwd+bwd tokens/s ({clock} clock)" for clock in clocks)
    lines = [f"| | model | params (M) | {head} | peak memory during the step (MiB) |"]
    lines.append("|---|---|---:|" + "---:|" * (len(clocks) + 1))
    for v in VARIANTS:
        if v.key not in res.seconds:
            lines.append(f"| ({v.key}) | {v.label} | |" + " not run (no GPU in this session) |" * len(clocks) + " |")
            continue
        speeds = " | ".join(f"{res.tokens_per_second(v.key, clock):,.0f}" for clock in clocks)
        lines.append(
            f"| ({v.key}) | {v.label} | {res.params[v.key] / 1e6:.1f} | {speeds} | {res.peak[v.key] / MiB:,.0f} |"
        )
    return lines


def profile_table(profiles: dict, base: str, other: str, top: int = 10) -> list:
    """The ops whose self time differs most between two variants: where the difference goes."""
    x, y = profiles[base], profiles[other]
    ops = sorted(set(x) | set(y), key=lambda op: -abs(y.get(op, 0) - x.get(op, 0)))[:top]
    lines = [f"| op | ({base}) ms | ({other}) ms | ({other}) − ({base}) ms |", "|---|---:|---:|---:|"]
    for op in ops:
        lines.append(f"| `{op}` | {x.get(op, 0):.1f} | {y.get(op, 0):.1f} | {y.get(op, 0) - x.get(op, 0):+.1f} |")
    total_x, total_y = sum(x.values()), sum(y.values())
    return lines + [f"| all ops | {total_x:.1f} | {total_y:.1f} | {total_y - total_x:+.1f} |"]


def eval_lm_table(res: Results) -> list:
    clocks = list(next(iter(res.eval_lm.values())))
    lines = ["| | model | " + " | ".join(f"tokens/s ({clock} clock)" for clock in clocks) + " |"]
    lines.append("|---|---|" + "---:|" * len(clocks))
    for v in VARIANTS:
        if v.key in res.eval_lm:
            note = " — fairseq-train dropped the --scale-* flags: this checkpoint is (a)"
            label = v.label + (note if v.key == "b" and res.fairseq_train_drops_flags else "")
            speeds = " | ".join(f"{res.eval_lm[v.key][clock]:,.0f}" for clock in clocks)
            lines.append(f"| ({v.key}) | {label} | {speeds} |")
    return lines


def kernel_table(rows: list) -> list:
    lines = ["| dtype | width | pass | torch ms | triton ms | torch/triton |", "|---|---:|---|---:|---:|---:|"]
    return lines + [f"| {d} | {w} | {n} | {t:.3f} | {k:.3f} | {t / k:.2f} |" for d, w, n, t, k in rows]


def results_section(res: Results) -> str:
    setup = res.setup
    lines = [
        f"### {res.device.upper()}: generated by `benchmarks/bench_lm.py --device {res.device}`",
        "",
        f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- Machine: {machine_description(res.device)}",
        f"- Versions: {versions()}",
        f"- Models: `{' '.join(setup.shape_flags) or setup.archs['ours']}`; batch {setup.batch} × sequence "
        f"{setup.seq_len} = {setup.batch * setup.seq_len} tokens a step, {str(setup.dtype).removeprefix('torch.')}",
        f"- Timing: median of {res.rounds} interleaved rounds of {setup.steps_per_timing} step(s) each",
        "",
        *models_table(res),
        "",
        *targets_table(res),
    ]
    for base, other in (("c", "d"), ("b", "d")):
        lines += ["", f"Self time per step of the ops that differ most between ({base}) and ({other}) "
                  "(torch.profiler, the least of 3 interleaved runs):", ""]
        lines += profile_table(res.profiles, base, other)
    lines += ["", *explanation(res)]
    if res.eval_lm:
        lines += ["", "`fairseq-eval-lm` on the valid split (its main, in this process), median of interleaved runs; "
                  "checkpoints written by `fairseq-train`:", ""]
        lines += eval_lm_table(res)
    if res.kernel_rows:
        lines += ["", "LayerNorm kernels on 16384 rows (`triton.testing.do_bench`):", ""]
        lines += kernel_table(res.kernel_rows)
    return "\n".join(lines) + "\n"


def gpu_placeholder_section() -> str:
    lines = [
        "### CUDA: not run (no GPU in this session)",
        "",
        "`python benchmarks/bench_lm.py --device cuda` on a GPU host replaces this section with (a)–(e) at the "
        "125M preset (sequence 2048, batch 8, bf16), the target (e) within 1% of (c), and Triton's LayerNorm "
        f"against torch's at widths {', '.join(map(str, KERNEL_WIDTHS))}, fp16 and bf16, forward and "
        "forward+backward.",
        "",
        "| | model | fwd+bwd tokens/s | peak memory (MiB) |",
        "|---|---|---:|---:|",
        *[f"| ({v.key}) | {v.label} | not run (no GPU in this session) | |" for v in VARIANTS],
    ]
    return "\n".join(lines) + "\n"


def write_section(path: Path, name: str, text: str, replace: bool = True):
    """Put ``text`` between this section's markers in ``path``, keeping everything else."""
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    doc = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"{begin}\n{text}{end}"
    if begin in doc and end in doc:
        if not replace:
            return
        head, rest = doc.split(begin, 1)
        doc = head + block + rest.split(end, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(doc)


# ------------------------------------------------------------------ main
def measure(device: str, setup: Setup, data_dir: Path, rounds: int) -> Results:
    variants = [v for v in VARIANTS if device == "cuda" or not v.cuda_only]
    steps = {}
    for v in variants:
        model = build_model(v, setup, data_dir)
        dictionary = model.decoder.dictionary
        steps[v.key] = Step(model, setup, device, len(dictionary), dictionary.nspecial)
    shapes = normformer_shapes(steps["d"].model, setup)
    return Results(
        device=device,
        setup=setup,
        rounds=rounds,
        params={key: sum(p.numel() for p in step.model.parameters()) for key, step in steps.items()},
        seconds=time_interleaved(steps, setup, rounds),
        peak={key: step.peak_bytes() for key, step in steps.items()},
        profiles=profile_interleaved(steps),
        kernel_rows=layer_norm_kernel_timings() if device == "cuda" else [],
        normformer_shapes=shapes,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on CPU (1: CPU time = the work)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (median)")
    parser.add_argument("--eval-lm-rounds", type=int, default=3, help="fairseq-eval-lm runs per model; 0 skips")
    parser.add_argument("--workdir", type=Path, default=REPO_ROOT / "work" / "bench", help="corpus, checkpoints")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    setup = SETUPS[args.device]
    corpus = build_corpus(args.workdir / "corpus", fmt="lm", vocab_size=8000, max_chars=2_000_000)

    res = measure(args.device, setup, corpus.data_bin, args.rounds)
    if args.eval_lm_rounds:
        eval_variants = [v for v in VARIANTS if not v.cuda_only]
        res.eval_lm, res.fairseq_train_drops_flags = eval_lm_throughput(
            eval_variants, setup, corpus.data_bin, args.workdir, args.device, args.eval_lm_rounds
        )
    section = results_section(res)
    write_section(args.out, f"bench_lm {args.device}", section)
    if args.device == "cpu" and not torch.cuda.is_available():
        write_section(args.out, "bench_lm cuda", gpu_placeholder_section(), replace=False)
    print(section)


if __name__ == "__main__":
    main()
