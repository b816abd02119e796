"""The renderer: a results file → its Markdown section, targets judged from targets.json."""
import json

from benchmarks.formulas import model_flops_per_step
from benchmarks.report import TARGETS, norm_schemes_section, render, results_section, write_section

SHAPES = {"layers": 2, "embed": 32, "ffn": 64, "vocab": 54, "seq_len": 16, "tokens": 32}


def _variant(label, seconds, peak, dtype="float32"):
    return {"label": label, "arch": "a", "flags": [], "dtype": dtype, "params": 2_000_000, "peak_bytes": peak,
            "seconds_per_step": [{"wall": 2 * s, "cpu": s} for s in seconds]}  # fmt: skip


def results() -> dict:
    """Medians (cpu clock): fairseq_scale_flags 1.0 s, preln 1.0 s, normformer 1.01 s (+1%, the 9.0 an
    outlier the median drops); normformer_bf16 0.5, 0.45, 0.5 s; peak memory +5%; the 2·64³-FLOP matmul
    at best 1e-3 s in float32, 2.5e-4 s in bfloat16."""
    return {
        "device": "cpu", "date": "2026-01-01 00:00 UTC", "command": "python -m benchmarks measure",
        "machine": "test machine", "load_average": [7.5, 8.0, 8.5], "versions": {"torch": "2.13"},
        "setup": {"archs": {"ours": "normformer_lm"}, "shape_flags": ["--decoder-layers", "2"], "seq_len": 16,
                  "batch": 2, "dtype": "float32", "steps_per_timing": 1},
        "variants": {
            "fairseq_transformer_lm": _variant("fairseq's", [1.0, 1.0, 1.0], 100 * 2**20),
            "fairseq_scale_flags": _variant("fairseq's --scale-*", [1.0, 1.0, 1.0], 100 * 2**20),
            "preln": _variant("our Pre-LN", [1.0, 1.0, 1.0], 100 * 2**20),
            "normformer": _variant("our NormFormer", [1.01, 9.0, 1.0], 105 * 2**20),
            "normformer_bf16": _variant("our NormFormer, --bf16", [0.5, 0.45, 0.5], 60 * 2**20, "bfloat16"),
        },
        "shapes": SHAPES,
        "matmul_peaks": [{"size": 64, "dtype": "float32", "seconds": [{"wall": 4e-3, "cpu": 2e-3},
                                                                     {"wall": 2e-3, "cpu": 1e-3}]},
                         {"size": 64, "dtype": "bfloat16", "seconds": [{"wall": 5e-4, "cpu": 2.5e-4}]}],
    }  # fmt: skip


def _rows(section: str, start: str) -> list:
    return [line for line in section.splitlines() if line.startswith(start)]


def test_targets_met_and_missed():
    targets = json.loads(TARGETS.read_text())["cpu"]
    section = results_section(results(), targets, "r.json")
    speed, time, memory = (_rows(section, f"| {t['text']} |")[0] for t in targets)
    assert speed.endswith("| ≥ 1.15 | 0.990× (-1.0%) | **missed** |")  # 1.0 s / 1.01 s
    assert time.endswith("| ≤ 1.02 | 1.010× (+1.0%) | met |")
    assert memory.endswith("| ≤ 1.03 | 1.050× (+5.0%) | **missed** |")


def test_model_rows_speed_and_share_of_matmul_peak():
    section = results_section(results(), [], "r.json")
    peak_cpu, peak_wall = 2 * 64**3 / 1e-3, 2 * 64**3 / 2e-3  # best of the repeats, each clock
    flops = model_flops_per_step(SHAPES)
    share_cpu, share_wall = flops / 1.01 / peak_cpu, flops / 2.02 / peak_wall
    row = _rows(section, "| `normformer` |")[0]
    assert row == (f"| `normformer` | our NormFormer | 2.0 | 16 | 32 | {100 * share_wall:.0f}% | "
                   f"{100 * share_cpu:.0f}% | 105 |")  # fmt: skip
    assert _rows(section, "| `normformer_triton` |")[0].count("not run") == 4
    assert f"{flops / 1e9:,.1f} GFLOP" in section
    assert "| `preln_bf16` |" in section and "| `normformer_bf16` | our NormFormer, --bf16 | 2.0 | 32 | 64 |" in section


def test_bf16_variant_against_its_fp32_variant():
    """Per-round ratios 0.5/1.01, 0.45/9.0, 0.5/1.0: median 0.495; its share of the bf16 peak (4× fp32's)."""
    section = results_section(results(), [], "r.json")
    share_bf16 = model_flops_per_step(SHAPES) / 0.5 / (2 * 64**3 / 2.5e-4)
    share_fp32 = model_flops_per_step(SHAPES) / 1.01 / (2 * 64**3 / 1e-3)
    assert (f"- `normformer_bf16`: 0.50 s a step (cpu clock) against `normformer`'s 1.01 s: 0.495× its time "
            f"(median of 3 per-round ratios, range 0.050–0.500), 2.02× its speed; {100 * share_bf16:.0f}% of the "
            f"bfloat16 matmul peak (`normformer`: {100 * share_fp32:.0f}% of the float32 peak).") in section
    assert "2048 tokens a step, float32, the `--bf16` variants bfloat16" not in section  # 2 × 16 here
    assert "32 tokens a step, float32, the `--bf16` variants bfloat16" in section
    assert "load average (1, 5, 15 min) at the end of the run: 7.5, 8.0, 8.5" in section


def test_render_keeps_the_prose_and_marks_a_device_without_results(tmp_path):
    (tmp_path / "cpu.json").write_text(json.dumps(results()))
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nprose before\n\n<!-- begin benchmarks cpu -->\nold\n<!-- end benchmarks cpu -->\n"
                   "\nprose after\n")  # fmt: skip
    render(tmp_path, doc, tmp_path)
    text = doc.read_text()
    assert "prose before" in text and "prose after" in text and "\nold\n" not in text
    assert "rendered from `cpu.json`" in text
    cuda = text.split("<!-- begin benchmarks cuda -->")[1]
    assert cuda.startswith("\n### CUDA: not run (no `cuda.json`)")
    assert "| Triton LayerNorm at least as fast as torch's | ≥ 1.0 | not run |  |" in cuda


def test_write_section_replaces_only_its_own_block(tmp_path):
    doc = tmp_path / "d.md"
    write_section(doc, "x", "one\n")
    write_section(doc, "y", "two\n")
    write_section(doc, "x", "three\n")
    assert doc.read_text() == ("# Benchmarks\n\n<!-- begin x -->\nthree\n<!-- end x -->\n\n"
                               "<!-- begin y -->\ntwo\n<!-- end y -->\n")  # fmt: skip


def _scheme(flags, cpu_seconds, params):
    return {"label": "a scheme", "purpose": "", "flags": flags, "params": params, "peak_bytes": 3 * 2**20,
            "first_step_seconds": {"wall": 4.0, "cpu": 3.0},
            "seconds_per_step": [{"wall": 2 * s, "cpu": s} for s in cpu_seconds]}  # fmt: skip


def test_norm_schemes_ratios_are_medians_of_the_rounds():
    """Pre-LN 1, 2, 1, 1, 1, 1 s; NormFormer 1.1 s each round (a round where another process took Pre-LN's core
    counts once: median of 1.1, 0.55, 1.1, ... = 1.1); compiled 1.0 s: 1.0 / 1.1 = 0.909 of the eager step."""
    r = results() | {"vocab": 2104, "variants": {
        "preln": _scheme([], [1.0, 2.0, 1.0, 1.0, 1.0, 1.0], 100),
        "normformer": _scheme(["--scale-fc"], [1.1] * 6, 150),
        "normformer_compiled": _scheme(["--scale-fc", "--ffn-norm-impl", "compile"], [1.0] * 6, 150)},
        "compiled_against_eager": {"normformer_compiled": {
            "eager_loss": 7.5, "compiled_loss": 7.5000001, "relative_l2_grad_difference": 3e-7,
            "max_abs_grad_difference": 2e-7, "max_abs_grad": 0.5, "parameter": "w"}}}
    section = norm_schemes_section(r, "n.json")
    ones = "1.000 [1.000, 1.000]"
    assert f"| `preln`: a scheme | — | 100 | +0 | 1.000 | {ones} | {ones} | 3 | 4.0 |" in section
    assert "| `normformer`: a scheme | `--scale-fc` | 150 | +50 | 1.100 | 1.100 [0.550, 1.100] |" in section
    assert "- `normformer_compiled` / `normformer`: 0.909 [0.909, 0.909]" in section
    assert ("- `normformer_compiled`: loss 7.500000 against eager 7.500000; gradients: ‖Δ‖/‖g‖ = 3.0e-07, "
            "largest |Δ| 2.0e-07 (`w`) against the largest |g| 5.0e-01") in section
