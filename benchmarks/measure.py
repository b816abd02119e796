"""Measure the variants: forward+backward time and peak memory of a training step, op profiles, the
machine's matrix-multiply peak, and (GPU) Triton's LayerNorm against torch's. Returns plain numbers
(lists of rounds, not medians): report.py summarises them."""
import datetime
import os
import platform
import time
from pathlib import Path

import fairseq
import numpy as np
import torch
import torch.nn.functional as F
from fairseq import utils
from torch.profiler import ProfilerActivity, profile

import fairseq_normformer
from fairseq_normformer.criterions.mlm_nsp import MlmNspCriterion, MlmNspCriterionConfig

from .formulas import model_shapes
from .variants import LAMBERT_ARCHS, Setup, build_model, build_pair_model, variants_for

PROFILED = ("fairseq_scale_flags", "preln", "normformer", "normformer_bf16")  # report.py compares pairs op by op
KERNEL_WIDTHS = (768, 1024, 3072, 4096)


def _sync(device: str):
    if device == "cuda":
        torch.cuda.synchronize()


def clocked(fn, repeats: int, device: str) -> dict:
    """Seconds per call of ``fn`` by clock: "wall", and on CPU also "cpu", this process's CPU time
    (the work done, without the time spent waiting for a core on a shared machine)."""
    _sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        fn()
    _sync(device)
    clocks = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    return {clock: t / repeats for clock, t in clocks.items() if clock == "wall" or device == "cpu"}


class Step:
    """Forward + cross-entropy (fp32 logits, as fairseq's criteria take them) + backward of one model on
    one fixed random batch, the model in ``dtype`` (default: the setup's)."""

    def __init__(self, model, setup: Setup, device: str, dtype: torch.dtype = None):
        dictionary = model.decoder.dictionary
        self.model = model.to(device=device, dtype=dtype or setup.dtype).train()
        g = torch.Generator().manual_seed(0)
        tokens = torch.randint(dictionary.nspecial, len(dictionary), (setup.batch, setup.seq_len + 1), generator=g)
        self.inputs, self.targets = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
        self.device = device

    def __call__(self) -> torch.Tensor:
        self.model.zero_grad(set_to_none=False)
        logits = self.model(self.inputs)[0]  # (B, T, V)
        loss = F.cross_entropy(logits.float().flatten(0, 1), self.targets.flatten())
        loss.backward()
        return loss.detach()

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
            _sync(self.device)
        attr = "self_device_time_total" if self.device == "cuda" else "self_cpu_time_total"
        return {e.key: getattr(e, attr) / 1e3 for e in prof.key_averages()}


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


def time_interleaved(steps: dict, steps_per_timing: int, rounds: int) -> dict:
    """{name: [{clock: seconds per step} of each round]}, the variants interleaved."""
    for step in steps.values():  # warm-up: allocator, gradient buffers, kernel compilation
        step()
    times = {name: [] for name in steps}
    for r, order in rotations(list(steps), rounds):
        for name in order:
            times[name].append(clocked(steps[name], steps_per_timing, steps[name].device))
        report = ", ".join(f"{n} " + " ".join(f"{c} {s:.2f}s" for c, s in t[-1].items()) for n, t in times.items())
        print(f"round {r + 1}/{rounds}, seconds per step by clock: {report}", flush=True)
    return times


def profile_interleaved(steps: dict, rounds: int = 3) -> dict:
    """{name: {op: self ms}} of PROFILED (those measured), the least over interleaved rounds (the least
    disturbed)."""
    profiles = {name: {} for name in PROFILED if name in steps}
    for _, order in rotations(list(profiles), rounds):
        for name in order:
            for op, ms in steps[name].self_time_by_op().items():
                profiles[name][op] = min(ms, profiles[name].get(op, ms))
    return profiles


def matmul_peak(size: int, repeats: int, device: str, dtype: torch.dtype) -> dict:
    """Seconds of one size×size×size matrix multiply (2·size³ FLOPs), each repeat by clock."""
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    clocked(lambda: a @ b, 1, device)  # warm-up
    runs = [clocked(lambda: a @ b, 1, device) for _ in range(repeats)]
    return {"size": size, "dtype": _name(dtype), "seconds": runs}


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def layer_norm_kernel_timings(rows: int = 16384) -> list:
    """[{dtype, width, pass, torch_ms, triton_ms, copy_ms}] from triton.testing.do_bench (median of its runs);
    copy_ms: a copy of the same tensor, the bandwidth the kernels are compared with (scripts/gpu, docs/gpu.md)."""
    from triton.testing import do_bench

    from fairseq_normformer.kernels.triton_layer_norm import layer_norm

    results = []
    for dtype in (torch.float16, torch.bfloat16):
        for width in KERNEL_WIDTHS:
            x = torch.randn(rows, width, device="cuda", dtype=dtype, requires_grad=True)
            w = torch.randn(width, device="cuda", dtype=dtype, requires_grad=True)
            b = torch.randn(width, device="cuda", dtype=dtype, requires_grad=True)
            dy = torch.randn_like(x)
            copy, source = torch.empty_like(x), x.detach()
            copy_ms = do_bench(lambda: copy.copy_(source))
            impls = {"torch": lambda: F.layer_norm(x, (width,), w, b), "triton": lambda: layer_norm(x, w, b)}
            passes = {"forward": lambda f: f(), "fwd+bwd": lambda f: torch.autograd.grad(f(), (x, w, b), dy)}
            for name, run in passes.items():
                ms = {impl: do_bench(lambda: run(fn)) for impl, fn in impls.items()}
                dtype_name = _name(dtype)
                results.append({"dtype": dtype_name, "width": width, "pass": name, "rows": rows,
                                "torch_ms": ms["torch"], "triton_ms": ms["triton"], "copy_ms": copy_ms})  # fmt: skip
    return results


def measure(device: str, setup: Setup, data_dir: Path, rounds: int, matmul_repeats: int) -> dict:
    """Every number of one benchmark run on ``device``, as plain JSON-able data."""
    variants = variants_for(device)
    steps = {v.name: Step(build_model(v, setup, data_dir), setup, device, v.dtype(setup)) for v in variants}
    seconds = time_interleaved(steps, setup.steps_per_timing, rounds)
    measured = {
        v.name: {
            "label": v.label,
            "arch": setup.arch(v),
            "flags": list(v.flags),
            "dtype": _name(v.dtype(setup)),
            "params": sum(p.numel() for p in steps[v.name].model.parameters()),
            "seconds_per_step": seconds[v.name],
            "peak_bytes": steps[v.name].peak_bytes(),
        }
        for v in variants
    }
    return {
        "variants": measured,
        "shapes": model_shapes(steps["normformer"].model, setup.seq_len, setup.batch),
        "matmul_peaks": [matmul_peak(setup.matmul_size, matmul_repeats, device, dtype)
                         for dtype in dict.fromkeys(v.dtype(setup) for v in variants)],  # one per dtype
        "profiles": profile_interleaved(steps),
        "layer_norm_kernels": layer_norm_kernel_timings() if device == "cuda" else [],
    }


def run_description(device: str, setup: Setup, command: str) -> dict:
    """Where, when, with what and how a run was made."""
    import triton

    return {
        "device": device,
        "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "command": command,
        "machine": _machine(device),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "fairseq": fairseq.__version__,
                     "triton": triton.__version__, "fairseq-normformer": fairseq_normformer.__version__},
        "setup": {"archs": setup.archs, "shape_flags": list(setup.shape_flags), "seq_len": setup.seq_len,
                  "batch": setup.batch, "dtype": _name(setup.dtype),
                  "steps_per_timing": setup.steps_per_timing},
    }  # fmt: skip


def _machine(device: str) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    text = f"{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s), {platform.system()}"
    text += f" ({', '.join(_bf16_instructions())} bf16 instructions)" if _bf16_instructions() else ""
    return text + (f"; GPU: {torch.cuda.get_device_name()}" if device == "cuda" else "")


def _bf16_instructions() -> list:
    """The CPU's bf16 matrix instructions (what a bf16 matmul's speed depends on), from /proc/cpuinfo."""
    try:
        flags = next(ln.split(":", 1)[1].split() for ln in open("/proc/cpuinfo") if ln.startswith("flags"))
    except (OSError, StopIteration):
        return []
    return [flag for flag in ("avx512_bf16", "amx_bf16") if flag in flags]


class PairStep(Step):
    """Forward + the mlm_nsp loss (MLM over the masked tokens, NSP) + backward on one batch of pairs."""

    def __init__(self, model, task, sample: dict, device: str):
        self.model, self.device = model.to(device).train(), device
        self.criterion = MlmNspCriterion(MlmNspCriterionConfig(), task)
        self.sample = utils.move_to_cuda(sample) if device == "cuda" else sample

    def __call__(self):
        self.model.zero_grad(set_to_none=False)
        self.criterion(self.model, self.sample)[0].backward()


def real_pairs(task, batch: int, seed: int):
    """A batch of ``batch`` masked MLM+NSP pairs drawn at random from the corpus's training pairs, and
    the dataset (its sizes are the corpus's pair-length distribution)."""
    task.load_dataset("train")
    data = task.dataset("train")
    chosen = np.random.default_rng(seed).choice(len(data), size=batch, replace=False)
    return data.collater([data[int(i)] for i in chosen]), data


def measure_lambert(device: str, data_dir: Path, batch: int, rounds: int, seed: int = 0) -> dict:
    """lambert_base against a BERT-base-shaped encoder on the same real pairs, interleaved."""
    built = {arch: build_pair_model(arch, data_dir) for arch in LAMBERT_ARCHS}
    sample, data = real_pairs(built["postln_bert_base"][0], batch, seed)
    steps = {arch: PairStep(model, task, sample, device) for arch, (task, model) in built.items()}
    seconds = time_interleaved(steps, 1, rounds)
    src = sample["net_input"]["src_tokens"]
    encoder = built["lambert_base"][1].encoder.sentence_encoder
    layout = encoder.layout(src)
    sizes = np.asarray(data.sizes)
    return {
        "batch": {"pair_lengths": src.ne(encoder.pad).sum(1).tolist(), "padded_len": src.size(1),
                  "blocks": layout.block_tokens.size(0), "max_segments": layout.max_segments,
                  "segment_length": encoder.segment_length, "seed": seed},
        "corpus_pairs": {"count": len(sizes), "mean": float(sizes.mean()), "median": float(np.median(sizes)),
                         "p90": float(np.percentile(sizes, 90)), "max": int(sizes.max())},
        "shape": {"layers": len(encoder.layers), "embed": encoder.layer_cfg.embed_dim,
                  "vocab": len(built["lambert_base"][0].source_dictionary)},
        "models": {arch: {"label": label, "params": sum(p.numel() for p in steps[arch].model.parameters()),
                          "seconds_per_step": seconds[arch], "peak_bytes": steps[arch].peak_bytes()}
                   for arch, label in LAMBERT_ARCHS.items()},
    }  # fmt: skip
