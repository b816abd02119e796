"""benchmarks/hf_generate.py at a tiny shape: the three models do the same work (as many new tokens,
through the same shapes), and the report's ratio is the median of the per-round ratios."""
import torch

from benchmarks.hf_generate import generate_greedy, measure_generate, models
from benchmarks.report import hf_generate_section

TINY = dict(layers=2, embed=32, heads=4, ffn=64, vocab=50, max_positions=64)


@torch.no_grad()
def test_every_model_generates_the_asked_tokens_and_has_the_same_shape():
    built = models(TINY)
    assert type(built["gpt2"][1]).__name__ == "GPT2LMHeadModel"
    assert [built[n][1].config.scale_heads for n in ("preln", "normformer")] == [False, True]
    sizes = {name: sum(p.numel() for n, p in model.named_parameters() if "layers" in n or ".h." in n)
             for name, (_, model) in built.items()}  # fmt: skip
    assert sizes["gpt2"] == sizes["preln"] < sizes["normformer"]  # NormFormer adds its LayerNorms and γ
    results = measure_generate(rounds=2, prompt_len=5, new_tokens=7, shape=TINY)
    assert [len(m["seconds"]) for m in results["models"].values()] == [2, 2, 2]
    prompt = torch.arange(4, 9)[None]
    for _, model in built.values():
        assert generate_greedy(model, prompt, 7).shape == (1, 12)


def test_section_reports_the_median_of_per_round_ratios_and_judges_the_bound():
    def rounds(*seconds):
        return [{"cpu": s} for s in seconds]

    results = {
        "command": "python -m benchmarks hf-generate", "date": "today", "machine": "test", "versions": {"torch": "x"},
        "load_average": [1.0, 1.0, 1.0], "shape": TINY, "prompt_len": 5, "new_tokens": 10,
        "models": {"gpt2": {"label": "G", "seconds": rounds(1.0, 2.0, 1.0)},
                   "preln": {"label": "P", "seconds": rounds(1.0, 2.2, 1.0)},
                   "normformer": {"label": "N", "seconds": rounds(1.1, 2.0, 1.04)}},
    }  # fmt: skip
    section = hf_generate_section(results, "x.json")
    assert "| `normformer`: N | 110.00 | 1.040 |" in section  # rounds' ratios 1.1, 1.0, 1.04: median 1.04
    assert "| `preln`: P | 100.00 | 1.000 |" in section
    assert "1.040 (cpu clock), **met**." in section
    results["models"]["normformer"]["seconds"] = rounds(1.1, 2.2, 1.0)
    assert "1.100 (cpu clock), **missed**." in hf_generate_section(results, "x.json")
