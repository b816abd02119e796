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
