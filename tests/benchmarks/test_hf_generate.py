"""benchmarks/hf_generate.py at a tiny shape: the three models do the same work (as many new tokens,
through the same shapes), and the report's ratio is the median over builds of each build's median
per-round ratio."""
import pytest
import torch

from benchmarks.hf_generate import generate_greedy, measure_generate, models
from benchmarks.report import build_ratios, hf_generate_section, median_interval

TINY = dict(layers=2, embed=32, heads=4, ffn=64, vocab=50, max_positions=64)


@torch.no_grad()
@pytest.mark.slow
def test_every_model_generates_the_asked_tokens_and_has_the_same_shape():
    built = models(TINY)
    assert type(built["gpt2"][1]).__name__ == "GPT2LMHeadModel"
    assert [built[n][1].config.scale_heads for n in ("preln", "normformer")] == [False, True]
    sizes = {name: sum(p.numel() for n, p in model.named_parameters() if "layers" in n or ".h." in n)
             for name, (_, model) in built.items()}  # fmt: skip
    assert sizes["gpt2"] == sizes["preln"] < sizes["normformer"]  # NormFormer adds its LayerNorms and γ
    results = measure_generate(builds=2, rounds=3, prompt_len=5, new_tokens=7, shape=TINY)
    for m in results["models"].values():
        assert [r["build"] for r in m["seconds"]] == [0, 0, 0, 1, 1, 1]
    prompt = torch.arange(4, 9)[None]
    for _, model in built.values():
        assert generate_greedy(model, prompt, 7).shape == (1, 12)


def test_a_builds_ratio_is_the_median_of_its_rounds_ratios():
    gpt2 = {"seconds": [{"cpu": 1.0, "build": b} for b in (0, 0, 0, 1, 1, 1)]}
    model = {"seconds": [{"cpu": s, "build": b} for s, b in zip((1.1, 3.0, 0.9, 0.8, 0.7, 0.75), (0, 0, 0, 1, 1, 1))]}
    assert build_ratios(model, gpt2, "cpu") == [1.1, 0.75]  # a slow round (3.0) does not move its build's


def test_section_reports_the_median_of_the_builds_ratios_with_its_interval_and_judges_the_bound():
    def rounds(*seconds):  # one round a build
        return [{"cpu": s, "build": b} for b, s in enumerate(seconds)]

    gpt2 = (1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)  # round 2 slow for all: the ratios pair it away
    results = {
        "command": "python -m benchmarks hf-generate", "date": "today", "machine": "test", "versions": {"torch": "x"},
        "load_average": [1.0, 1.0, 1.0], "shape": TINY, "prompt_len": 5, "new_tokens": 10,
        "models": {"gpt2": {"label": "G", "seconds": rounds(*gpt2)},
                   "preln": {"label": "P", "seconds": rounds(*gpt2)},
                   "normformer": {"label": "N", "seconds": rounds(1.1, 2.0, 1.04, 1.0, 1.02, 1.01, 1.03, 0.99, 1.0)}},
    }  # fmt: skip
    section = hf_generate_section(results, "x.json")
    # builds' ratios 1.1, 1.0, 1.04, 1.0, 1.02, 1.01, 1.03, 0.99, 1.0; sorted: the median the 5th (1.01),
    # for 9 builds the 95% interval the 2nd and 8th (1.0, 1.04)
    assert "| `normformer`: N | 102.00 | 1.010 [1.000, 1.040] |" in section
    assert "| `preln`: P | 100.00 | 1.000 [1.000, 1.000] |" in section
    assert "`normformer` 0.990–1.100" in section
    assert "(cpu clock): 1.010 [1.000, 1.040], **met** (the whole 95% interval is at or below it)." in section
    results["models"]["normformer"]["seconds"] = rounds(1.1, 2.2, 1.06, 1.07, 1.03, 1.08, 1.09, 1.1, 1.1)
    assert "1.090 [1.060, 1.100], **missed**" in hf_generate_section(results, "x.json")
    results["models"]["normformer"]["seconds"] = rounds(1.1, 2.2, 1.04, 1.07, 1.03, 1.08, 1.09, 1.1, 1.1)
    assert "1.090 [1.040, 1.100], **undecided** (the 95% interval contains it)" in hf_generate_section(results, "x")


def test_median_interval_is_the_order_statistics_of_the_binomial_table():
    """The distribution-free 95% interval of the median: ranks 4 and 12 of 15, 40 and 61 of 100."""
    assert median_interval(range(1, 16)) == (4, 12)
    assert median_interval(range(1, 101)) == (40, 61)
    assert median_interval(range(1, 6)) is None  # P(all 5 on one side) = 1/16 > 5%
