"""Every model family, built after the same seed with each normalization switch, has the parameter names,
shapes and initial values that the code before the shared stack (models/stacks.py) gave it: existing
checkpoints and HuggingFace exports load and convert unchanged. Each family's stack is the shared one.

stack_state_dicts.json was written by ``state_dict_summary`` at commit c077553, before the refactor (the
models' own stack code and ``use_norm_kind_``); each entry is (shape, sum, sum of |x|) of one tensor."""
import json
from pathlib import Path

import pytest
import torch

from fairseq_normformer.models.stacks import LayerStack

from .encoder_builders import TINY_ENCODER, build_encoder_model, dictionary_with_mask
from .lm_builders import TINY, normformer_lm, tiny_dictionary
from .translation_builders import TINY_MT, build_translation_model, language_dictionary

GOLDEN = Path(__file__).with_name("stack_state_dicts.json")
NORMFORMER = ["--scale-attn", "--scale-fc", "--scale-heads"]
LAMBERT = ["--encoder-layers", "2", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "48",
           "--encoder-attention-heads", "4", "--segment-length", "4", "--max-segments", "8"]  # fmt: skip

# name -> (family, arch, flags)
MODELS = {
    "lm preln": ("lm", "normformer_lm", []),
    "lm every operation": ("lm", "normformer_lm", NORMFORMER + ["--scale-resids", "--scale-qkv", "--layernorm-embedding"]),
    "lm qk-norm sandwich": ("lm", "normformer_lm", ["--qk-norm", "--sandwich-norm", "--scale-attn"]),
    "lm rmsnorm": ("lm", "normformer_lm", ["--norm-type", "rmsnorm", "--scale-fc", "--scale-qkv"]),
    "lm dyt first layer": ("lm", "normformer_lm", ["--norm-type", "dyt", "--normformer-layers", "first:1", *NORMFORMER]),
    "lm ffn layernorm_nobias": ("lm", "normformer_lm", ["--scale-fc", "--ffn-norm-type", "layernorm_nobias"]),
    "lm post-ln": ("lm", "normformer_lm", ["--post-ln"]),
    "lm deepnorm": ("lm", "normformer_lm", ["--post-ln", "--deepnorm", "--scale-resids"]),
    "roberta preln": ("encoder", "preln_roberta_base", []),
    "roberta normformer": ("encoder", "normformer_roberta_base", ["--normformer-layers", "1"]),
    "roberta deepnorm": ("encoder", "normformer_roberta", ["--deepnorm"]),
    "roberta rmsnorm qk-norm": ("encoder", "preln_roberta_base", ["--norm-type", "rmsnorm", "--qk-norm"]),
    "roberta dyt sandwich": ("encoder", "preln_roberta_base", ["--norm-type", "dyt", "--sandwich-norm"]),
    "bert postln": ("encoder", "postln_bert_base", []),
    "bert preln rmsnorm": ("encoder", "preln_bert_base", ["--norm-type", "rmsnorm", *NORMFORMER]),
    "lambert": ("lambert", "lambert", []),
    "lambert normformer": ("lambert", "normformer_lambert_base", []),
    "transformer postln": ("translation", "normformer_transformer", []),
    "transformer normformer": ("translation", "normformer_transformer_iwslt_de_en",
                               ["--scale-enc-heads", "--scale-enc-attn", "--sandwich-norm"]),
    "transformer deepnorm rmsnorm": ("translation", "normformer_transformer", ["--deepnorm", "--norm-type", "rmsnorm"]),
}  # fmt: skip


def build(family, arch, flags):
    torch.manual_seed(0)
    if family == "lm":
        return normformer_lm(tiny_dictionary(), arch, TINY + flags)
    if family == "translation":
        return build_translation_model(arch, TINY_MT + flags, language_dictionary("de"), language_dictionary("en"))[1]
    tiny = TINY_ENCODER if family == "encoder" else LAMBERT
    return build_encoder_model(arch, dictionary_with_mask(), tiny + flags)


def state_dict_summary(model) -> dict:
    return {
        name: [list(t.shape), float(t.double().sum()), float(t.double().abs().sum())]
        for name, t in model.state_dict().items()
    }


@pytest.mark.parametrize("name", MODELS)
def test_parameter_names_shapes_and_initial_values_are_unchanged(name):
    expected = json.loads(GOLDEN.read_text())[name]
    model = build(*MODELS[name])
    stacks = [m for m in model.modules() if isinstance(m, LayerStack)]  # the shared stack builds every family
    assert len(stacks) == (2 if MODELS[name][0] == "translation" else 1)
    summary = state_dict_summary(model)
    assert sorted(summary) == sorted(expected)
    for key, (shape, total, absolute) in expected.items():
        assert summary[key][0] == shape, key
        assert summary[key][1:] == pytest.approx([total, absolute], rel=1e-6, abs=1e-6), key
