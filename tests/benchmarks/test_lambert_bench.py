"""The attention-FLOPs formulas of the LaMBERT benchmark against torch's count of a real step, and
the benchmark's report on a tiny measurement."""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.formulas import bert_attention_flops, lambert_attention_flops
from benchmarks.variants import build_pair_model

M, LAYERS, EMBED = 4, 2, 16
SHAPE = ("--encoder-layers", str(LAYERS), "--encoder-embed-dim", str(EMBED), "--encoder-ffn-embed-dim", "32",
         "--encoder-attention-heads", "4")  # fmt: skip
PAIRS = torch.tensor([[0, 10, 11, 12, 13, 14, 2, 15, 16, 17, 2, 1, 1],  # A 5, B 3 tokens: 2 + 1 segments
                      [0, 10, 11, 2, 15, 16, 17, 18, 19, 20, 21, 22, 2]])  # A 2, B 8: 1 + 2  # fmt: skip


def attention_flops(model) -> int:
    """FLOPs of every bmm in forward + backward: with SDPA's math backend, exactly QKᵀ and AV (the
    linear layers run as mm/addmm)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        features, _ = model(PAIRS, features_only=True)
        features.sum().backward()
    return counter.get_flop_counts()["Global"].get(torch.ops.aten.bmm, 0)


def test_attention_flops_formulas_equal_flop_counter(dict_dir):
    _, lambert = build_pair_model("lambert_tiny", dict_dir, SHAPE + ("--segment-length", str(M), "--max-segments", "6"))
    blocks, max_segments = 6, 3  # 2 + 1 and 1 + 2 segments
    assert attention_flops(lambert) == lambert_attention_flops(LAYERS, EMBED, blocks, M, len(PAIRS), max_segments)
    _, bert = build_pair_model("postln_bert_base", dict_dir, SHAPE)
    assert attention_flops(bert) == bert_attention_flops(LAYERS, EMBED, len(PAIRS), PAIRS.size(1))


def test_lambert_section_reports_ratios_of_medians():
    """lambert_section on hand-made numbers: BERT 2 s a step (median; 9 s an outlier), LaMBERT 1 s."""
    from benchmarks.report import lambert_section

    def model(label, seconds):
        return {"label": label, "params": 1_000_000, "peak_bytes": 2**20 * seconds[0],
                "seconds_per_step": [{"cpu": s} for s in seconds]}  # fmt: skip

    results = {
        "command": "python -m benchmarks lambert", "date": "today", "machine": "test", "versions": {"torch": "x"},
        "load_average": [1.0, 1.0, 1.0], "shape": {"layers": 12, "embed": 768, "vocab": 30522},
        "batch": {"pair_lengths": [10, 30], "padded_len": 33, "blocks": 6, "max_segments": 3,
                  "segment_length": M, "seed": 0},
        "corpus_pairs": {"count": 5, "mean": 20.0, "median": 20.0, "p90": 30.0, "max": 33},
        "models": {"lambert_base": model("L", [1.0, 1.0, 1.0]), "postln_bert_base": model("B", [2.0, 9.0, 2.0])},
    }  # fmt: skip
    section = lambert_section(results, "x.json")
    # 40 tokens / 1 s; attention 3·12·4·768·(6·5·7 + 2·4) and 3·12·4·768·2·33² FLOPs
    assert "| `lambert_base`: L | 1.0 | 1.0 | 40 | 1 | 0.02 |" in section
    assert "| `postln_bert_base`: B | 1.0 | 1.0 | 20 | 2 | 0.24 |" in section
    assert "2.00× (cpu clock); peak memory ratio 0.50; attention FLOPs ratio 0.100" in section
