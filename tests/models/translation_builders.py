"""Build fairseq's own ``transformer`` and our ``normformer_transformer`` from command-line flags, in-process."""
import types

import torch
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY

import fairseq_normformer  # noqa: F401  (registers normformer_transformer)

from .lm_builders import randomize_

TINY_MT = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32",
           "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "48", "--decoder-ffn-embed-dim", "48",
           "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--dropout", "0"]  # fmt: skip
PAD, EOS = 1, 2  # fairseq Dictionary's indices; real tokens are drawn from [4, vocabulary size)


def language_dictionary(prefix, size=40):
    d = Dictionary()
    for i in range(size):
        d.add_symbol(f"{prefix}{i}")
    return d


def translation_task(src_dict, tgt_dict):
    return types.SimpleNamespace(source_dictionary=src_dict, target_dictionary=tgt_dict)


def parse_translation(arch, flags, data="unused-data-dir"):
    parser = options.get_training_parser()
    argv = [data, "--task", "translation", "--arch", arch, "-s", "de", "-t", "en"] + list(flags)
    return options.parse_args_and_arch(parser, argv)


def build_translation_model(arch, flags, src_dict, tgt_dict):
    """Built as fairseq-train builds an argparse model (the arch function, then build_model); returns (args, model)."""
    args = parse_translation(arch, flags)
    return args, ARCH_MODEL_REGISTRY[arch].build_model(args, translation_task(src_dict, tgt_dict))


def fairseq_and_ours(their_flags, our_arch, our_flags, src_dict, tgt_dict):
    """fairseq's transformer with its 1-d parameters randomized, and ours loaded with its state dict
    (strict: the same parameter names), both in eval mode."""
    _, theirs = build_translation_model("transformer", their_flags, src_dict, tgt_dict)
    randomize_(theirs)
    _, ours = build_translation_model(our_arch, our_flags, src_dict, tgt_dict)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    return theirs.eval(), ours.eval()


def padded_batch(src_lengths, tgt_lengths, vocab=40, seed=3):
    """Left-padded sources and right-padded decoder inputs (fairseq's translation defaults), EOS first."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.full((len(src_lengths), max(src_lengths)), PAD)
    for row, length in enumerate(src_lengths):
        src[row, src.size(1) - length :] = torch.randint(4, vocab, (length,), generator=generator)
    prev = torch.full((len(tgt_lengths), max(tgt_lengths)), PAD)
    for row, length in enumerate(tgt_lengths):
        prev[row, :length] = torch.randint(4, vocab, (length,), generator=generator)
        prev[row, 0] = EOS
    return src, torch.tensor(src_lengths), prev
