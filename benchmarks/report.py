"""Turn a results file (what measure.py and eval_lm.py wrote) into its section of docs/benchmarks.md,
judging targets.json. Pure: no measuring, so the doc can be regenerated from the stored JSON."""
import json
import math
import statistics
from pathlib import Path

import torch

from .formulas import (
    added_activation_bytes,
    bert_attention_flops,
    lambert_attention_flops,
    matmul_weights,
    model_flops_per_step,
)
from .variants import VARIANTS

TARGETS = Path(__file__).resolve().parent / "targets.json"
MiB = 2**20
LAYER_NORM_OPS = ("aten::native_layer_norm", "aten::native_layer_norm_backward")
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm")
NOT_RUN = "not run"
PROFILE_PAIRS = (("preln", "normformer"), ("fairseq_scale_flags", "normformer"), ("normformer", "normformer_bf16"))


def median_by_clock(runs: list) -> dict:
    """{clock: median} of a list of {clock: value}."""
    return {clock: statistics.median(run[clock] for run in runs) for clock in runs[0]}


class Summary:
    """The numbers of one results file that tables and targets are made of."""

    def __init__(self, results: dict):
        self.results = results
        self.variants = results["variants"]
        self.clocks = list(next(iter(self.variants.values()))["seconds_per_step"][0])
        self.clock = "cpu" if "cpu" in self.clocks else "wall"  # what targets are judged on
        self.seconds = {name: median_by_clock(v["seconds_per_step"]) for name, v in self.variants.items()}
        self.tokens = results["shapes"]["tokens"]
        self.flops = model_flops_per_step(results["shapes"])
        self.peaks = {peak["dtype"]: peak for peak in results["matmul_peaks"]}

    def tokens_per_second(self, name: str, clock: str = None) -> float:
        return self.tokens / self.seconds[name][clock or self.clock]

    def matmul_flops_per_second(self, dtype: str, clock: str = None) -> float:
        """The best of the repeats of the ``dtype`` matmul (the least disturbed), 2·n³ FLOPs each."""
        peak = self.peaks[dtype]
        return 2 * peak["size"] ** 3 / min(run[clock or self.clock] for run in peak["seconds"])

    def peak_fraction(self, name: str, clock: str = None) -> float:
        """The share of the matmul peak of the variant's dtype a training step reaches: model FLOPs per
        second / peak."""
        peak = self.matmul_flops_per_second(self.variants[name]["dtype"], clock)
        return self.flops / self.seconds[name][clock or self.clock] / peak

    def quantity(self, name: str, quantity: str) -> float:
        if quantity == "tokens_per_second":
            return self.tokens_per_second(name)
        if quantity == "seconds_per_step":
            return self.seconds[name][self.clock]
        return self.variants[name][quantity]


# ------------------------------------------------------------------ targets
def judge(target: dict, summary: Summary) -> list:
    """[(text, measured, met)] of one target: met is None where it was not run."""
    if target["quantity"] == "layer_norm_kernel_speed":
        rows = summary.results["layer_norm_kernels"] if summary else []
        if not rows:
            return [(target["text"], NOT_RUN, None)]
        return [(f"{target['text']}, {r['dtype']}, width {r['width']}, {r['pass']}",
                 *_ratio_met(r["torch_ms"] / r["triton_ms"], target, "× torch's speed")) for r in rows]  # fmt: skip
    if summary is None or target["variant"] not in summary.variants:
        return [(target["text"], NOT_RUN, None)]
    ratio = summary.quantity(target["variant"], target["quantity"]) / summary.quantity(
        target["baseline"], target["quantity"]
    )
    return [(target["text"], *_ratio_met(ratio, target, f"× ({100 * (ratio - 1):+.1f}%)"))]


def _ratio_met(ratio: float, target: dict, unit: str) -> tuple:
    met = ratio >= target["at_least"] if "at_least" in target else ratio <= target["at_most"]
    return f"{ratio:.3f}{unit}", met


def _bound(target: dict) -> str:
    return f"≥ {target['at_least']}" if "at_least" in target else f"≤ {target['at_most']}"


def targets_table(targets: list, summary: Summary) -> list:
    clock = f" (time by {summary.clock} clock)" if summary else ""
    lines = [f"| target{clock} | ratio bound | measured | |", "|---|---|---|---|"]
    for target in targets:
        for text, measured, met in judge(target, summary):
            verdict = "" if met is None else "met" if met else "**missed**"
            lines.append(f"| {text} | {_bound(target)} | {measured} | {verdict} |")
    return lines


# ------------------------------------------------------------------ tables
def models_table(s: Summary) -> list:
    speed = " | ".join(f"fwd+bwd tokens/s ({c} clock)" for c in s.clocks)
    fraction = " | ".join(f"share of its dtype's matmul peak ({c} clock)" for c in s.clocks)
    lines = [f"| variant | model | params (M) | {speed} | {fraction} | peak memory during the step (MiB) |"]
    lines.append("|---|---|---:|" + "---:|" * (2 * len(s.clocks) + 1))
    for v in VARIANTS:
        if v.name not in s.variants:
            lines.append(f"| `{v.name}` | {v.label} | |" + f" {NOT_RUN} |" * (2 * len(s.clocks)) + " |")
            continue
        m = s.variants[v.name]
        speeds = " | ".join(f"{s.tokens_per_second(v.name, c):,.0f}" for c in s.clocks)
        fractions = " | ".join(f"{100 * s.peak_fraction(v.name, c):.0f}%" for c in s.clocks)
        lines.append(f"| `{v.name}` | {m['label']} | {m['params'] / 1e6:.1f} | {speeds} | {fractions} "
                     f"| {m['peak_bytes'] / MiB:,.0f} |")  # fmt: skip
    return lines


def flops_lines(s: Summary) -> list:
    sh = s.results["shapes"]
    peaks = [f"- Matrix-multiply peak of this machine, {dtype}: one {p['size']}×{p['size']}×{p['size']} `a @ b` "
             f"(2·{p['size']}³ FLOPs), best of {len(p['seconds'])}: "
             + ", ".join(f"{s.matmul_flops_per_second(dtype, c) / 1e9:,.0f} GFLOP/s ({c} clock)" for c in s.clocks)
             + ", at the torch thread count above." for dtype, p in s.peaks.items()]  # fmt: skip
    return [
        *peaks,
        f"- Model FLOPs per step = 6·N·tokens + 12·L·d·T·tokens = {s.flops / 1e9:,.1f} GFLOP, with N = "
        f"L·(4d² + 2d·f) + d·V = {matmul_weights(sh) / 1e6:.1f}M matmul weights (L {sh['layers']}, d {sh['embed']}, "
        f"f {sh['ffn']}, V {sh['vocab']}, T {sh['seq_len']}, {sh['tokens']} tokens); the share of matmul peak "
        "is (model FLOPs / seconds per step) / the peak of the variant's dtype, both by the same clock.",
    ]


def bf16_lines(s: Summary) -> list:
    """Each --bf16 variant against its fp32 variant, timed in the same rounds: the median and range of
    the per-round time ratios, and each one's share of its own dtype's matmul peak."""
    lines = []
    for v in VARIANTS:
        if v.name not in s.variants or v.fp32_variant not in s.variants:
            continue
        mine, fp32 = (s.variants[name]["seconds_per_step"] for name in (v.name, v.fp32_variant))
        ratios = sorted(a[s.clock] / b[s.clock] for a, b in zip(mine, fp32))
        ratio = statistics.median(ratios)
        lines.append(
            f"- `{v.name}`: {s.seconds[v.name][s.clock]:.2f} s a step ({s.clock} clock) against "
            f"`{v.fp32_variant}`'s {s.seconds[v.fp32_variant][s.clock]:.2f} s: {ratio:.3f}× its time (median of "
            f"{len(ratios)} per-round ratios, range {ratios[0]:.3f}–{ratios[-1]:.3f}), {1 / ratio:.2f}× its speed; "
            f"{100 * s.peak_fraction(v.name):.0f}% of the {s.variants[v.name]['dtype']} matmul peak "
            f"(`{v.fp32_variant}`: {100 * s.peak_fraction(v.fp32_variant):.0f}% of the "
            f"{s.variants[v.fp32_variant]['dtype']} peak)."
        )
    return lines



def profile_table(profiles: dict, base: str, other: str, top: int = 10) -> list:
    """The ops whose self time differs most between two variants: where the difference goes."""
    x, y = profiles[base], profiles[other]
    ops = sorted(set(x) | set(y), key=lambda op: -abs(y.get(op, 0) - x.get(op, 0)))[:top]
    lines = [f"| op | `{base}` ms | `{other}` ms | difference ms |", "|---|---:|---:|---:|"]
    for op in ops:
        lines.append(f"| `{op}` | {x.get(op, 0):.1f} | {y.get(op, 0):.1f} | {y.get(op, 0) - x.get(op, 0):+.1f} |")
    total_x, total_y = sum(x.values()), sum(y.values())
    return lines + [f"| all ops | {total_x:.1f} | {total_y:.1f} | {total_y - total_x:+.1f} |"]


def share(profile: dict, ops: tuple) -> float:
    """The fraction of a profile's op time spent in ``ops``."""
    return sum(ms for op, ms in profile.items() if op in ops) / sum(profile.values())


def explanation(s: Summary) -> list:
    """Numbers that explain the differences: LayerNorm's and the matrix multiplies' share of each
    profile, and the activation memory NormFormer's LayerNorms keep, by formula."""
    profiles, peak = s.results["profiles"], {n: v["peak_bytes"] for n, v in s.variants.items()}
    c, d = profiles["preln"], profiles["normformer"]
    ln_c, ln_d = (sum(p.get(op, 0) for op in LAYER_NORM_OPS) for p in (c, d))
    extra = added_activation_bytes(s.results["shapes"], getattr(torch, s.results["setup"]["dtype"]).itemsize)
    ln_shares = ", ".join(f"`{name}` {100 * share(p, LAYER_NORM_OPS):.1f}%" for name, p in profiles.items())
    matmul_shares = ", ".join(f"`{name}` {100 * share(p, MATMUL_OPS):.0f}%" for name, p in profiles.items())
    return [
        f"- LayerNorm ops (forward and backward) in the profiles: `preln` {ln_c:.0f} ms, `normformer` {ln_d:.0f} ms "
        f"a step, {ln_d - ln_c:+.0f} ms; all ops: {sum(d.values()) - sum(c.values()):+.0f} ms. "
        f"Share of op time: {ln_shares}.",
        f"- Share of op time in matrix multiplies ({', '.join(MATMUL_OPS)}), the same work in every model: "
        f"{matmul_shares}.",
        f"- Activations `normformer` keeps for backward beyond `preln`, by formula (`added_activation_bytes`: the "
        f"Post-Attn LN's input and HeadScale's folded W^O, × {s.results['shapes']['layers']} layers): "
        f"{extra / MiB:.0f} MiB = {100 * extra / peak['preln']:.1f}% of `preln`'s peak; measured difference: "
        f"{(peak['normformer'] - peak['preln']) / MiB:+.0f} MiB.",
    ]


def eval_lm_table(s: Summary) -> list:
    eval_lm = s.results["eval_lm"]
    speeds = {name: median_by_clock(runs) for name, runs in eval_lm["runs"].items()}
    clocks = list(next(iter(speeds.values())))
    lines = ["| variant | model | " + " | ".join(f"tokens/s ({c} clock)" for c in clocks) + " |"]
    lines.append("|---|---|" + "---:|" * len(clocks))
    for name, speed in speeds.items():
        label = s.variants[name]["label"]
        if name == "fairseq_scale_flags" and eval_lm["fairseq_train_drops_scale_flags"]:
            label += " — fairseq-train dropped the --scale-* flags: this checkpoint is `fairseq_transformer_lm`"
        lines.append(f"| `{name}` | {label} | " + " | ".join(f"{speed[c]:,.0f}" for c in clocks) + " |")
    return lines


def kernel_table(rows: list) -> list:
    lines = ["| dtype | width | pass | torch ms | triton ms | torch/triton |", "|---|---:|---|---:|---:|---:|"]
    return lines + [f"| {r['dtype']} | {r['width']} | {r['pass']} | {r['torch_ms']:.3f} | {r['triton_ms']:.3f} "
                    f"| {r['torch_ms'] / r['triton_ms']:.2f} |" for r in rows]  # fmt: skip


# ------------------------------------------------------------------ sections of docs/benchmarks.md
def run_lines(results: dict, source: str) -> list:
    setup, rounds = results["setup"], len(next(iter(results["variants"].values()))["seconds_per_step"])
    versions = ", ".join(f"{k} {v}" for k, v in results["versions"].items())
    load = ", ".join(f"{x:.1f}" for x in results["load_average"])
    models = " ".join(setup["shape_flags"]) or setup["archs"]["ours"]
    dtypes = {v["dtype"] for v in results["variants"].values()} - {setup["dtype"]}
    other = "".join(f", the `--bf16` variants {d}" for d in dtypes)
    return [
        f"- Measured by `{results['command']}` on {results['date']}; rendered from `{source}`"
        + (f". {results['note']}" if results.get("note") else ""),
        f"- Machine: {results['machine']}; load average (1, 5, 15 min) at the end of the run: {load}",
        f"- Versions: {versions}",
        f"- Models: `{models}`; batch {setup['batch']} × sequence {setup['seq_len']} = "
        f"{setup['batch'] * setup['seq_len']} tokens a step, {setup['dtype']}{other}",
        f"- Timing: median of {rounds} interleaved rounds of {setup['steps_per_timing']} step(s) each",
    ]


def results_section(results: dict, targets: list, source: str) -> str:
    s = Summary(results)
    lines = [f"### {results['device'].upper()}", "", *run_lines(results, source), "", *models_table(s), "",
             *flops_lines(s), *bf16_lines(s), "", *targets_table(targets, s)]  # fmt: skip
    if results.get("profiles"):
        for base, other in PROFILE_PAIRS:
            if other not in results["profiles"]:
                continue
            lines += ["", f"Self time per step of the ops that differ most between `{base}` and `{other}` "
                      "(torch.profiler, the least of 3 interleaved runs):", ""]  # fmt: skip
            lines += profile_table(results["profiles"], base, other)
        lines += ["", *explanation(s)]
    if results.get("eval_lm"):
        lines += ["", "`fairseq-eval-lm` on the valid split (its main, in this process), median of interleaved runs; "
                  "checkpoints written by `fairseq-train`:", ""]  # fmt: skip
        lines += eval_lm_table(s)
    if results.get("layer_norm_kernels"):
        lines += ["", "LayerNorm kernels (`triton.testing.do_bench`):", "", *kernel_table(results["layer_norm_kernels"])]
    return "\n".join(lines) + "\n"


def not_run_section(device: str, targets: list, source: str) -> str:
    lines = [
        f"### {device.upper()}: not run (no `{source}`)",
        "",
        f"`python -m benchmarks measure --device {device}` on a host with this device writes `{source}` and "
        "replaces this section."
        + (" The GPU check (docs/gpu.md: `bash scripts/gpu/run.sh OUT_DIR`, prepared for one call on a lent GPU) "
           "runs it among its stages." if device == "cuda" else ""),
        "",
        "| variant | model | what it is for |",
        "|---|---|---|",
        *[f"| `{v.name}` | {v.label} | {v.purpose} |" for v in VARIANTS],
        "",
        *targets_table(targets, None),
    ]
    return "\n".join(lines) + "\n"


def write_section(path: Path, name: str, text: str):
    """Put ``text`` between this section's markers in ``path``, keeping everything else."""
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    doc = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"{begin}\n{text}{end}"
    if begin in doc and end in doc:
        head, rest = doc.split(begin, 1)
        doc = head + block + rest.split(end, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(doc)


PAPER_LAMBERT_PARAMS = 156e6  # the LaMBERT paper's base model
BERT_VOCAB = 30522  # BERT's WordPiece vocabulary


def lambert_section(results: dict, source: str) -> str:
    """LaMBERT against BERT: tokens/s, peak memory, attention FLOPs by formula, parameters."""
    models, b, shape = results["models"], results["batch"], results["shape"]
    tokens = sum(b["pair_lengths"])
    seconds = {arch: median_by_clock(m["seconds_per_step"]) for arch, m in models.items()}
    clocks = list(next(iter(seconds.values())))
    bert, lambert = "postln_bert_base", "lambert_base"
    flops = {bert: bert_attention_flops(shape["layers"], shape["embed"], len(b["pair_lengths"]), b["padded_len"]),
             lambert: lambert_attention_flops(shape["layers"], shape["embed"], b["blocks"], b["segment_length"],
                                              len(b["pair_lengths"]), b["max_segments"])}  # fmt: skip
    extra_vocab = BERT_VOCAB - shape["vocab"]  # tied embedding row + LM-head bias per symbol
    speed = " | ".join(f"fwd+bwd tokens/s ({c} clock)" for c in clocks)
    lines = [*run_lines_lambert(results, source), "",
             f"| model | params (M) | params with BERT's {BERT_VOCAB:,}-piece vocabulary (M) | {speed} "
             "| peak memory during the step (MiB) | attention GFLOP per step (formula) |",
             "|---|---:|---:|" + "---:|" * (len(clocks) + 2)]  # fmt: skip
    for arch, m in models.items():
        speeds = " | ".join(f"{tokens / seconds[arch][c]:,.0f}" for c in clocks)
        lines.append(f"| `{arch}`: {m['label']} | {m['params'] / 1e6:.1f} | {(m['params'] + extra_vocab * (shape['embed'] + 1)) / 1e6:.1f} "
                     f"| {speeds} | {m['peak_bytes'] / MiB:,.0f} | {flops[arch] / 1e9:,.2f} |")  # fmt: skip
    ratios = ", ".join(f"{seconds[bert][c] / seconds[lambert][c]:.2f}× ({c} clock)" for c in clocks)
    peak = models[lambert]["peak_bytes"] / models[bert]["peak_bytes"]
    lines += ["", f"- Speed of `lambert_base` relative to BERT (tokens/s ratio, the paper claims about 3×): {ratios}; "
              f"peak memory ratio {peak:.2f}; attention FLOPs ratio {flops[lambert] / flops[bert]:.3f}.",
              f"- Parameters: the paper reports {PAPER_LAMBERT_PARAMS / 1e6:.0f}M for its base model."]  # fmt: skip
    return "\n".join(lines) + "\n"


def provenance_lines(results: dict, source: str) -> list:
    """Command, date, note, machine, load and versions of a run."""
    versions = ", ".join(f"{k} {v}" for k, v in results["versions"].items())
    return [
        f"- Measured by `{results['command']}` on {results['date']}; rendered from `{source}`"
        + (f". {results['note']}" if results.get("note") else ""),
        f"- Machine: {results['machine']}; load average (1, 5, 15 min) at the end: "
        + ", ".join(f"{x:.1f}" for x in results["load_average"]),
        f"- Versions: {versions}",
    ]


def run_lines_lambert(results: dict, source: str) -> list:
    b, c = results["batch"], results["corpus_pairs"]
    rounds = len(next(iter(results["models"].values()))["seconds_per_step"])
    return [
        *provenance_lines(results, source),
        f"- Batch: {len(b['pair_lengths'])} MLM+NSP pairs drawn at random (seed {b['seed']}) from the corpus's "
        f"{c['count']:,} training pairs (pair length mean {c['mean']:.0f}, median {c['median']:.0f}, 90th percentile "
        f"{c['p90']:.0f}, max {c['max']}); this batch: lengths {b['pair_lengths']}, {sum(b['pair_lengths'])} tokens, "
        f"BERT pads to {b['padded_len']}, LaMBERT makes {b['blocks']} blocks of {b['segment_length']} "
        f"(at most {b['max_segments']} segments a pair); tokens/s counts the batch's real tokens",
        f"- Timing: median of {rounds} interleaved rounds of one step (forward, mlm_nsp loss, backward), fp32",
    ]


HF_GENERATE_BOUND = 1.05  # issue 22: the NormFormer export within 5% of GPT-2's time
CONFIDENCE = 0.95


def median_interval(values: list, confidence: float = CONFIDENCE):
    """Distribution-free interval for the median: the order statistics x_(j) and x_(n+1-j), j the largest
    with P(Binomial(n, 1/2) < j) <= (1 - confidence) / 2 (coverage >= confidence). None below 6 values."""
    xs, n = sorted(values), len(values)
    j, below = 0, 0.0
    while below + math.comb(n, j) / 2**n <= (1 - confidence) / 2:
        below += math.comb(n, j) / 2**n
        j += 1
    return (xs[j - 1], xs[n - j]) if j else None


def build_ratios(model: dict, gpt2: dict, clock: str) -> list:
    """Each build's ratio: the median over its rounds of ``model``'s time over GPT-2's in the same round
    (the two ran back to back)."""
    by_build = {}
    for mine, theirs in zip(model["seconds"], gpt2["seconds"]):
        by_build.setdefault(mine["build"], []).append(mine[clock] / theirs[clock])
    return [statistics.median(ratios) for ratios in by_build.values()]


def _ratio_cell(ratios: list) -> str:
    interval = median_interval(ratios)
    return f"{statistics.median(ratios):.3f}" + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")


def hf_generate_verdict(ratios: list) -> str:
    """met / missed when the median's 95% interval lies on one side of the bound, else undecided."""
    interval = median_interval(ratios)
    if interval is None:
        return "**undecided** (fewer than 6 builds give no 95% interval)"
    if interval[1] <= HF_GENERATE_BOUND:
        return "**met** (the whole 95% interval is at or below it)"
    if interval[0] > HF_GENERATE_BOUND:
        return "**missed** (the whole 95% interval is above it)"
    return "**undecided** (the 95% interval contains it)"


def hf_generate_section(results: dict, source: str) -> str:
    """Greedy generate() of the exports against GPT-2: ms per new token, and each model's time over
    GPT-2's as the median over builds of each build's ratio (the median of its per-round ratios: the
    models run back to back within a round) with its 95% interval and the builds' spread; the target
    is judged on the CPU clock where there is one."""
    models, shape = results["models"], results["shape"]
    clocks = [c for c in ("wall", "cpu") if c in models["gpt2"]["seconds"][0]]
    clock = "cpu" if "cpu" in clocks else "wall"
    builds = len({r["build"] for r in models["gpt2"]["seconds"]})
    rounds = len(models["gpt2"]["seconds"]) // builds
    lines = [*provenance_lines(results, source),
             f"- Models: {shape['layers']} layers × {shape['embed']} ({shape['heads']} heads, FFN {shape['ffn']}), "
             f"vocabulary {shape['vocab']:,}, random weights, fp32; batch 1, a {results['prompt_len']}-token prompt, "
             f"{results['new_tokens']} greedy new tokens through the KV cache; {builds} builds of the models, each "
             f"timed over {rounds} rounds, the models back to back in each (in turn first)",
             "", "| model | " + " | ".join(f"ms per new token ({c} clock) | time / GPT-2's ({c}): median of the "
                                         f"builds' ratios [{CONFIDENCE:.0%} interval]" for c in clocks) + " |",
             "|---|" + "---:|---:|" * len(clocks)]  # fmt: skip
    for name, m in models.items():
        cells = " | ".join(f"{statistics.median(r[c] for r in m['seconds']) * 1e3 / results['new_tokens']:.2f} | "
                           f"{_ratio_cell(build_ratios(m, models['gpt2'], c))}" for c in clocks)  # fmt: skip
        lines.append(f"| `{name}`: {m['label']} | {cells} |")
    spread = {name: sorted(build_ratios(models[name], models["gpt2"], clock)) for name in models if name != "gpt2"}
    ratios = spread["normformer"]
    lines += ["", f"- Spread of the builds' ratios (each the median of its rounds'; {clock} clock): "
              + "; ".join(f"`{n}` {r[0]:.3f}–{r[-1]:.3f} (quartiles {statistics.quantiles(r, n=4)[0]:.3f}, "
                          f"{statistics.quantiles(r, n=4)[2]:.3f})" for n, r in spread.items()) + ".",
              f"- Target: NormFormer's time at most {HF_GENERATE_BOUND}× GPT-2's ({clock} clock): "
              f"{_ratio_cell(ratios)}, {hf_generate_verdict(ratios)}."]  # fmt: skip
    return "\n".join(lines) + "\n"


def round_ratios(model: dict, base: dict, clock: str) -> list:
    """``model``'s time over ``base``'s in each round (the two ran in the same round)."""
    return [mine[clock] / theirs[clock] for mine, theirs in zip(model["seconds_per_step"], base["seconds_per_step"])]


FUSED_PAIRS = (("normformer", "normformer_compiled"), ("normformer_nobias", "normformer_nobias_compiled"),
               ("normformer_rmsnorm", "normformer_rmsnorm_compiled"))  # fmt: skip


def norm_schemes_section(results: dict, source: str) -> str:
    """Each scheme's step time over Pre-LN's (the median of the per-round ratios and its 95% interval, both
    clocks), parameters, peak memory and first step; then each compiled FFN against its eager one."""
    models, setup = results["variants"], results["setup"]
    base, rounds = models["preln"], len(models["preln"]["seconds_per_step"])
    lines = [*provenance_lines(results, source),
             f"- Models: `{' '.join(setup['shape_flags'])}`, vocabulary {results['vocab']:,} (made-up symbols); batch "
             f"{setup['batch']} × sequence {setup['seq_len']} = {setup['batch'] * setup['seq_len']} tokens a step, "
             f"{setup['dtype']}, one thread; forward, cross-entropy and backward, dropout on",
             f"- Timing: {rounds} interleaved rounds of one step of each model (the order rotates each round), after "
             "one warm-up step each (the first step, compilation included, is its own column)",
             "", "| variant | flags | params | params − Pre-LN | CPU s / step | time / Pre-LN's (cpu clock) [95%] "
             "| time / Pre-LN's (wall clock) [95%] | peak memory of a step (MiB) | first step (s, wall) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, m in models.items():
        cells = " | ".join(_ratio_cell(round_ratios(m, base, clock)) for clock in ("cpu", "wall"))
        cpu = statistics.median(r["cpu"] for r in m["seconds_per_step"])
        flags = f"`{' '.join(m['flags'])}`" if m["flags"] else "—"
        lines.append(f"| `{name}`: {m['label']} | {flags} | {m['params']:,} | "
                     f"{m['params'] - base['params']:+,} | {cpu:.3f} | {cells} | {m['peak_bytes'] / MiB:,.0f} | "
                     f"{m['first_step_seconds']['wall']:.1f} |")  # fmt: skip
    lines += ["", "Compiled FFN (`--ffn-norm-impl compile`) over the same model eager, median of the per-round "
              "ratios [95% interval], cpu clock:", ""]  # fmt: skip
    lines += [f"- `{fused}` / `{eager}`: {_ratio_cell(round_ratios(models[fused], models[eager], 'cpu'))}"
              for eager, fused in FUSED_PAIRS if fused in models]  # fmt: skip
    lines += ["", "The same numbers? Each compiled model given its eager model's weights, dropout off, one batch:",
              ""]
    lines += [f"- `{name}`: loss {c['compiled_loss']:.6f} against eager {c['eager_loss']:.6f}; gradients: "
              f"‖Δ‖/‖g‖ = {c['relative_l2_grad_difference']:.1e}, largest |Δ| {c['max_abs_grad_difference']:.1e} "
              f"(`{c['parameter']}`) against the largest |g| {c['max_abs_grad']:.1e}"
              for name, c in results["compiled_against_eager"].items()]  # fmt: skip
    return "\n".join(lines) + "\n"


def render(results_dir: Path, doc: Path, root: Path, devices=("cpu", "cuda")):
    """Each device's section of ``doc`` from ``results_dir/DEVICE.json`` (or a "not run" section)."""
    targets = json.loads(TARGETS.read_text())
    for device in devices:
        path = results_dir / f"{device}.json"
        source = _relative(path, root)
        if path.exists():
            section = results_section(json.loads(path.read_text()), targets[device], source)
        else:
            section = not_run_section(device, targets[device], source)
        write_section(doc, f"benchmarks {device}", section)
        lambert = results_dir / f"lambert_{device}.json"
        if lambert.exists():
            write_section(doc, f"benchmarks lambert {device}", lambert_section(json.loads(lambert.read_text()),
                                                                              _relative(lambert, root)))
        generate = results_dir / f"hf_generate_{device}.json"
        if generate.exists():
            write_section(doc, f"benchmarks hf_generate {device}",
                          hf_generate_section(json.loads(generate.read_text()), _relative(generate, root)))
        schemes = results_dir / f"norm_schemes_{device}.json"
        if schemes.exists():
            write_section(doc, f"benchmarks norm_schemes {device}",
                          norm_schemes_section(json.loads(schemes.read_text()), _relative(schemes, root)))


def _relative(path: Path, root: Path) -> str:
    return str(path.resolve().relative_to(root)) if path.resolve().is_relative_to(root) else str(path)
