"""Build fairseq's own transformer_lm and our normformer_lm from command-line flags, in-process."""
import types

from fairseq import options
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models.transformer_lm import TransformerLanguageModel, base_lm_architecture

import fairseq_normformer  # noqa: F401  (registers normformer_lm)
from fairseq_normformer.models import NormFormerLanguageModel

TINY = ["--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "48",
        "--decoder-attention-heads", "4", "--dropout", "0", "--tokens-per-sample", "16"]


def tiny_dictionary(size=50):
    d = Dictionary()
    for i in range(size):
        d.add_symbol(f"w{i}")
    return d


def fake_task(dictionary):
    return types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)


def parse(arch, flags, data="unused-data-dir"):
    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, [data, "--task", "language_modeling", "--arch", arch] + flags)


def fairseq_transformer_lm(dictionary, flags, post_ln=False):
    """fairseq's TransformerLanguageModel built from an argparse Namespace: the one path on which
    its --scale-* flags take effect. ``post_ln`` flips decoder_normalize_before after the arch
    defaults (fairseq's base_lm_architecture forces Pre-LN)."""
    args = parse("transformer_lm", flags)
    base_lm_architecture(args)
    args.decoder_normalize_before = not post_ln
    return args, TransformerLanguageModel.build_model(args, fake_task(dictionary))


def normformer_lm(dictionary, arch="normformer_lm", flags=()):
    """Our model built exactly as fairseq-train builds it (argparse -> omegaconf -> build_model)."""
    cfg = convert_namespace_to_omegaconf(parse(arch, list(flags)))
    return NormFormerLanguageModel.build_model(cfg.model, fake_task(dictionary))


def num_params(model):
    return sum(p.numel() for p in model.parameters())
