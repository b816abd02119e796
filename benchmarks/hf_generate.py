"""Greedy generate() of the exported HuggingFace models (fairseq_normformer/hf/) against transformers' own
GPT-2 of the same shape (issue 22): batch 1, one thread, the models' calls interleaved in one process,
so that a machine's load falls on all of them alike. Random weights: the time does not depend on them."""
import gc
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from fairseq_normformer.hf.configuration_normformer import NormFormerConfig
from fairseq_normformer.hf.modeling_normformer import NormFormerForCausalLM

SHAPE = dict(layers=6, embed=512, heads=8, ffn=2048, vocab=8000, max_positions=1024)
NORMFORMER_OPERATIONS = dict(scale_attn=True, scale_fc=True, scale_heads=True)  # normformer_lm's (Fig. 1, Eq. 3)


def models(shape: dict = SHAPE) -> dict:
    """{name: (label, model)}: GPT-2, our Pre-LN export and our NormFormer export, eval mode."""
    ours = dict(vocab_size=shape["vocab"], hidden_size=shape["embed"], num_hidden_layers=shape["layers"],
                num_attention_heads=shape["heads"], intermediate_size=shape["ffn"],
                max_position_embeddings=shape["max_positions"])  # fmt: skip
    gpt2 = GPT2Config(vocab_size=shape["vocab"], n_embd=shape["embed"], n_layer=shape["layers"], n_head=shape["heads"],
                      n_inner=shape["ffn"], n_positions=shape["max_positions"], bos_token_id=2, eos_token_id=2)  # fmt: skip
    built = {
        "gpt2": ("transformers' GPT2LMHeadModel (Pre-LN, learned positions)", GPT2LMHeadModel(gpt2)),
        "preln": ("our Pre-LN export (sinusoidal positions)", NormFormerForCausalLM(NormFormerConfig(**ours))),
        "normformer": ("our NormFormer export (+ Post-Attn LN, FFN LN, HeadScale)",
                       NormFormerForCausalLM(NormFormerConfig(**ours, **NORMFORMER_OPERATIONS))),
    }  # fmt: skip
    return {name: (label, model.eval()) for name, (label, model) in built.items()}


def generate_greedy(model, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Exactly ``new_tokens`` greedy tokens through the KV cache (no eos stop, nothing suppressed)."""
    return model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                          min_new_tokens=new_tokens, do_sample=False, use_cache=True, pad_token_id=1,
                          suppress_tokens=None)  # fmt: skip


@torch.no_grad()
def time_rounds(built: dict, prompt: torch.Tensor, new_tokens: int, rounds: int) -> dict:
    """{name: [{"wall": s, "cpu": s} a round]} after one warm-up call each: in a round the models run
    back to back, each round started by the next model; the garbage collector is off while a call is
    timed (as timeit does), so that no model pays for another's garbage."""
    for _, model in built.values():
        generate_greedy(model, prompt, new_tokens)
    seconds, names = {name: [] for name in built}, list(built)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # each model first in turn
            gc.collect()
            gc.disable()
            wall, cpu = time.perf_counter(), time.process_time()
            generate_greedy(built[name][1], prompt, new_tokens)
            seconds[name].append({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu})
            gc.enable()
    return seconds


def measure_generate(builds: int, rounds: int, prompt_len: int, new_tokens: int, shape: dict = SHAPE) -> dict:
    """Per model: the seconds of each round by clock (wall, and this process's CPU time) and its build.
    Each build makes the three models afresh (new weights in new memory) and times ``rounds`` rounds:
    a model's speed holds for a build's life but differs between builds by several percent, likely
    with where its weights lie (two idle runs of one build each: NormFormer at 0.950 and 0.989 of
    GPT-2's time), so the builds sample it."""
    prompt = torch.randint(4, shape["vocab"], (1, prompt_len), generator=torch.Generator().manual_seed(0))
    seconds = {}
    for build in range(builds):
        built = models(shape)
        labels = {name: label for name, (label, _) in built.items()}
        for name, times in time_rounds(built, prompt, new_tokens, rounds).items():
            seconds.setdefault(name, []).extend({**t, "build": build} for t in times)
        del built  # freed before the next build is made
    return {
        "shape": shape,
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "models": {name: {"label": labels[name], "seconds": seconds[name]} for name in labels},
    }
