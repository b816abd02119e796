"""LaMBERT (models/lambert.py, modules/lambert_layer.py) against plain references: the segment layout
against a Python loop, both attention phases against attention written out block by block and head
by head, the perturbation property, and the lambert_mlm_nsp task's pair lengths and determinism."""
import math

import pytest
import torch
from fairseq import options, tasks

import fairseq_normformer  # noqa: F401  (registers lambert)
from fairseq_normformer.checks import BadInput
from fairseq_normformer.models.lambert import LambertSentenceEncoder
from fairseq_normformer.modules.lambert_layer import LambertLayer, LambertLayerConfig, segment_layout
from fairseq_normformer.modules.operations import operations_in
from tests.conftest import fairseq_config

PAD, CLS, SEP = 1, 0, 2
M, S = 4, 6  # segment length, max segments of the layers below
D, HEADS = 16, 4


def pair(a, b, length):
    """[CLS] A [SEP] B [SEP] of token ids 10.., padded to ``length``."""
    tokens = [CLS] + list(range(10, 10 + a)) + [SEP] + list(range(50, 50 + b)) + [SEP]
    return tokens + [PAD] * (length - len(tokens))


def batch():
    # A of 5 and B of 3 tokens: 2 + 1 segments; A of 2 and B of 8: 1 + 2 segments; A of 4, B of 1: 1 + 1
    return torch.tensor([pair(5, 3, 14), pair(2, 8, 14), pair(4, 1, 14)])


def reference_blocks(src):
    """Each sentence cut into segments of M tokens, the last one padded (-1), in pair order."""
    blocks = []
    for row in src.tolist():
        first_sep = row.index(SEP)
        sentences = [row[1:first_sep], [t for t in row[first_sep + 1 :] if t not in (SEP, PAD)]]
        for sentence in sentences:
            for start in range(0, len(sentence), M):
                piece = sentence[start : start + M]
                blocks.append(piece + [-1] * (M - len(piece)))
    return torch.tensor(blocks)


def test_layout_pads_each_sentence_to_the_next_multiple_of_m_and_maps_back():
    src = batch()
    layout = segment_layout(src, PAD, SEP, M)
    torch.testing.assert_close(layout.block_tokens, reference_blocks(src))
    assert layout.num_segments.tolist() == [3, 3, 2] and layout.segments_in_a.tolist() == [2, 1, 1]
    assert layout.block_sentence.tolist() == [0, 0, 1, 0, 1, 1, 0, 1]
    assert layout.block_position.tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    assert layout.segment_padding.tolist()[2] == [False, False, True]
    # features of the blocks go back to the token they came from; [CLS] gets phase 2's, [SEP] and padding 0
    blocks = layout.block_tokens.clamp(min=0).T.float()[..., None]  # (M, N, 1): the token id as feature
    blocks = torch.cat([blocks, torch.zeros(1, blocks.size(1), 1)])
    cls = torch.full((1, 3, 1), 7.0)
    flat = LambertSentenceEncoder.flat_features(blocks, cls, layout)[..., 0].T  # (B, T)
    expected = torch.where((src == SEP) | (src == PAD), 0, src).float()
    expected[:, 0] = 7.0
    torch.testing.assert_close(flat, expected)


def make_layer(segment_map="relative", **switches):
    torch.manual_seed(0)
    cfg = LambertLayerConfig(embed_dim=D, ffn_embed_dim=32, attention_heads=HEADS, causal=False,
                             max_segments=S, segment_map=segment_map, **switches)  # fmt: skip
    layer = LambertLayer(cfg).eval()
    with torch.no_grad():  # every parameter away from its initial value (HeadScale γ, LN weights 1, ...)
        for p in layer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return layer


def heads_attention(q, keys, values, attn, gamma):
    """One query (C,) over keys and values (K, C), head by head; HeadScale γ_i before W^O (Eq. 3)."""
    dh = D // HEADS
    out = []
    for h in range(HEADS):
        sl = slice(h * dh, (h + 1) * dh)
        weights = torch.softmax(keys[:, sl] @ q[sl] / math.sqrt(dh), dim=0)
        out.append(gamma[h] * (weights @ values[:, sl]))
    return attn.out_proj(torch.cat(out))


def reference_phase1(attn, x, layout):
    """x: (M+1, N, C). Block i's rows attend over its real tokens and proj(P_ij(s_j)) of every segment j
    of its pair, with P_ij(s) = s + r_(j-i) written out as the sum (or s for 'none')."""
    gamma = attn.head_scale if attn.head_scale is not None else torch.ones(HEADS)
    project = lambda proj, ln, v: ln(proj(v))  # noqa: E731
    out = torch.zeros_like(x)
    for n in range(x.size(1)):
        b, i = int(layout.block_example[n]), int(layout.block_position[n])
        pair_blocks = (layout.block_example == b).nonzero().flatten().tolist()
        inputs = [x[t, n] for t in range(M) if layout.block_tokens[n, t] >= 0]
        for j, m in enumerate(pair_blocks):
            offset = attn.offset_embeddings.weight[j - i + S - 1] if attn.offset_embeddings is not None else 0
            inputs.append(x[M, m] + offset)
        inputs = torch.stack(inputs)
        keys, values = project(attn.k_proj, attn.k_ln, inputs), project(attn.v_proj, attn.v_ln, inputs)
        for r in range(M + 1):
            q = project(attn.q_proj, attn.q_ln, x[r, n])
            out[r, n] = heads_attention(q, keys, values, attn, gamma)
    return out


def reference_phase2(attn, cls, segments, layout):
    """[CLS] over itself and its pair's segment rows (no P)."""
    gamma = attn.head_scale if attn.head_scale is not None else torch.ones(HEADS)
    out = torch.zeros_like(cls)
    for b in range(cls.size(1)):
        inputs = torch.cat([cls[:, b], segments[layout.block_example == b]])
        keys, values = attn.k_ln(attn.k_proj(inputs)), attn.v_ln(attn.v_proj(inputs))
        out[0, b] = heads_attention(attn.q_ln(attn.q_proj(cls[0, b])), keys, values, attn, gamma)
    return out


@pytest.mark.parametrize("segment_map,switches", [("relative", {}), ("none", {}),
                                                  ("relative", {"scale_qkv": True, "scale_heads": True})])  # fmt: skip
def test_both_phases_match_attention_written_out_block_by_block(segment_map, switches):
    layer = make_layer(segment_map, **switches)
    layout = segment_layout(batch(), PAD, SEP, M)  # 3 segments at most: fewer than the layer's S = 6
    masks = (layout.phase1_mask(), layout.phase2_mask())
    x = torch.randn(M + 1, layout.block_tokens.size(0), D)
    cls, segments = torch.randn(1, 3, D), torch.randn(layout.block_tokens.size(0), D)
    with torch.no_grad():
        ours = layer.self_attn.segment_phase(x, layout, masks[0])
        real = ~layout.block_padding.T  # padding rows attend too, but nothing reads them
        torch.testing.assert_close(ours[:M][real], reference_phase1(layer.self_attn, x, layout)[:M][real])
        torch.testing.assert_close(ours[M], reference_phase1(layer.self_attn, x, layout)[M])
        ours2 = layer.self_attn.cls_phase(cls, segments, layout, masks[1])
        torch.testing.assert_close(ours2, reference_phase2(layer.self_attn, cls, segments, layout))


def test_a_token_sees_other_segments_only_through_their_segment_embeddings():
    layer = make_layer(scale_attn=True, scale_fc=True, scale_heads=True)
    layout = segment_layout(batch(), PAD, SEP, M)
    masks = (layout.phase1_mask(), layout.phase2_mask())
    x, cls = torch.randn(M + 1, 8, D), torch.randn(1, 3, D)
    run = lambda x: layer(x, cls, layout, masks)  # noqa: E731
    with torch.no_grad():
        blocks, cls_out = run(x)
        tokens_changed = x.clone()
        tokens_changed[:M, 1] += torch.randn(M, D)  # the tokens of pair 0's second segment, not its embedding
        blocks2, cls2 = run(tokens_changed)
        seg_changed = x.clone()
        seg_changed[M, 1] += torch.randn(D)  # the segment embedding itself
        blocks3, cls3 = run(seg_changed)
    others = [0, 2, 3, 4, 5, 6, 7]
    torch.testing.assert_close(blocks2[:, others], blocks[:, others], rtol=0, atol=0)
    torch.testing.assert_close(cls2, cls_out, rtol=0, atol=0)
    assert (blocks2[:, 1] - blocks[:, 1]).abs().amin(dim=-1).gt(0).all()
    assert (blocks3[:, 0] - blocks[:, 0]).abs().max() > 1e-3  # same pair: sees it through s_1
    assert (cls3[0, 0] - cls_out[0, 0]).abs().max() > 1e-3
    torch.testing.assert_close(blocks3[:, 3:], blocks[:, 3:], rtol=0, atol=0)  # other pairs: nothing
    torch.testing.assert_close(cls3[0, 1:], cls_out[0, 1:], rtol=0, atol=0)


def parse(data_dir, arch, *flags, task="mlm_nsp"):
    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, [str(data_dir), "--task", task, "--arch", arch, *flags])


TINY = ("--encoder-embed-dim", str(D), "--encoder-ffn-embed-dim", "32", "--encoder-attention-heads", str(HEADS),
        "--segment-length", str(M), "--max-segments", str(S))  # fmt: skip


def build(data_dir, arch, *flags, task="mlm_nsp"):
    args = parse(data_dir, arch, *TINY, *flags, task=task)
    task = tasks.setup_task(args)
    return task, task.build_model(fairseq_config(args).model)


def test_normformer_lambert_is_the_operations_table_flags_away(tiny_bert_corpus):
    _, model = build(tiny_bert_corpus.data_bin, "normformer_lambert_base", "--scale-qkv")
    layer = model.encoder.sentence_encoder.layers[0]
    assert operations_in(dict(layer.named_parameters())) == {
        "scale_qkv": True, "scale_heads": True, "scale_attn": True, "scale_fc": True, "scale_resids": False,
        "qk_norm": False, "sandwich_norm": False}
    assert layer.normalize_before and len(model.encoder.sentence_encoder.layers) == 12


def test_norm_bench_options_lambert_lacks_are_refused_by_name(tiny_bert_corpus):
    with pytest.raises(BadInput, match=r"^lambert does not implement --qk-norm, --norm-type, --normformer-layers$"):
        build(tiny_bert_corpus.data_bin, "lambert_tiny", "--qk-norm", "--norm-type", "rmsnorm", "--normformer-layers", "0")


def test_model_refuses_a_pair_with_more_segments_than_max_segments(tiny_bert_corpus):
    _, model = build(tiny_bert_corpus.data_bin, "lambert_tiny")
    with pytest.raises(ValueError, match=r"needs 8 segments of 4 tokens, more than --max-segments 6.*20 tokens"):
        model(torch.tensor([pair(13, 13, 30)]))
    with pytest.raises(ValueError, match=r"start with \[CLS\]"):
        model(torch.tensor([pair(3, 3, 9)[1:]]))


def test_pretraining_pairs_follow_the_segments_and_are_deterministic(tiny_bert_corpus):
    task, model = build(tiny_bert_corpus.data_bin, "lambert_tiny", "--short-phase-epochs", "1",
                        "--short-phase-segments", "3", "--seed", "3", task="lambert_mlm_nsp")  # fmt: skip
    encoder = model.encoder.sentence_encoder

    def segments(epoch):
        task.load_dataset("train", epoch=epoch)
        data = task.dataset("train")
        data.set_epoch(epoch)
        items = [data[i] for i in range(0, len(data), 7)]
        layout = encoder.layout(data.collater(items)["net_input"]["src_tokens"])
        return layout.num_segments, [item["source"] for item in items]

    short, items = segments(1)
    full, _ = segments(2)
    assert short.max() <= 3 < full.max() <= S
    again, items_again = segments(1)  # a new dataset, same (seed, epoch, index): the same masked pairs
    assert all(torch.equal(a, b) for a, b in zip(items, items_again))
