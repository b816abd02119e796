"""HeadScale at the paper's position (Eq. 3, γ folded into W^O's input columns) costs no
activation-sized memory: a NormFormer layer's forward+backward makes exactly as many (T, B, C)
allocations with it as without it. fairseq's variant (γ on W^O's output) makes extra ones, which
shows the count can see them. Allocations are read from torch.profiler's memory events."""
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

from fairseq_normformer.modules import LayerConfig, NormFormerLayer

T, B, D, H = 9, 5, 40, 4  # T*B*D differs from D*D, D*4D and T*T*B*H: sizes do not collide
ACTIVATION_BYTES = T * B * D * 4


def allocation_sizes(**switches) -> Counter:
    """Sizes in bytes of every CPU tensor allocation in one forward+backward of a layer."""
    torch.manual_seed(0)
    layer = NormFormerLayer(LayerConfig(D, 4 * D, H, scale_attn=True, scale_fc=True, **switches))
    x = torch.randn(T, B, D, requires_grad=True)
    layer(x).sum().backward()  # warm-up: gradients of the parameters exist from now on
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        layer(x).sum().backward()
    events = prof.profiler.kineto_results.events()
    return Counter(e.nbytes() for e in events if e.name() == "[memory]" and e.nbytes() > 0)


def test_paper_head_scale_allocates_no_activation_sized_tensor():
    without = allocation_sizes(scale_heads=False)
    assert without[ACTIVATION_BYTES] > 0, f"no (T, B, C) allocation seen at all: {without}"
    paper = allocation_sizes(scale_heads=True, head_scale_position="paper")
    assert paper[ACTIVATION_BYTES] == without[ACTIVATION_BYTES]
    extra = paper - without
    assert all(size < ACTIVATION_BYTES for size in extra), f"extra allocations: {extra}"


def test_after_wo_head_scale_allocation_is_visible():
    without = allocation_sizes(scale_heads=False)
    after_wo = allocation_sizes(scale_heads=True, head_scale_position="after_wo")
    assert after_wo[ACTIVATION_BYTES] > without[ACTIVATION_BYTES]
