"""Build fairseq's own transformer_lm and our normformer_lm from command-line flags, in-process."""
import argparse
import types

import torch

from fairseq import checkpoint_utils, options
from fairseq.data import Dictionary
from fairseq.models.transformer_lm import TransformerLanguageModel, base_lm_architecture

import fairseq_normformer  # noqa: F401  (registers normformer_lm)
from fairseq_normformer.models import NormFormerLanguageModel
from tests.conftest import fairseq_config

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


def converted_fairseq_pair(dictionary, flags, post_ln=False):
    """fairseq's transformer_lm with its 1-d parameters randomized, and our normformer_lm built
    from it by the checkpoint converter (same weights), both in eval mode."""
    from fairseq_normformer.models.fairseq_compat import convert_model_cfg, convert_state_dict

    args, theirs = fairseq_transformer_lm(dictionary, flags, post_ln=post_ln)
    randomize_(theirs)
    ours_cfg = argparse.Namespace(**convert_model_cfg(vars(args), theirs.state_dict()))
    ours = NormFormerLanguageModel.build_model(ours_cfg, fake_task(dictionary))
    ours.load_state_dict(convert_state_dict(theirs.state_dict()), strict=True)
    return theirs.eval(), ours.eval()


def randomize_(model):
    """Move every LayerNorm/γ/λ off its identity initialisation, so a misplaced operation shows."""
    torch.manual_seed(0)
    _perturb_1d_(model, 0.5)


def _perturb_1d_(model, scale):
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(scale * torch.randn_like(p))


def normformer_lm(dictionary, arch="normformer_lm", flags=()):
    """Our model built exactly as fairseq-train builds it (argparse -> omegaconf -> build_model)."""
    cfg = fairseq_config(parse(arch, list(flags)))
    return NormFormerLanguageModel.build_model(cfg.model, fake_task(dictionary))


def randomized_normformer_lm(flags):
    """The TINY normformer_lm in eval mode, every 1-d parameter (LayerNorm, γ, λ) moved off its
    identity initialisation so that a misplaced operation shows in the logits."""
    torch.manual_seed(0)
    model = normformer_lm(tiny_dictionary(), flags=TINY + flags).eval()
    _perturb_1d_(model, 0.3)
    return model


def num_params(model):
    return sum(p.numel() for p in model.parameters())


def save_fairseq_checkpoint(path, args, model):
    """What fairseq's trainer writes, minus optimizer state (an argparse-era checkpoint)."""
    checkpoint_utils.torch_persistent_save(
        {"args": args, "model": model.state_dict(), "optimizer_history": [
            {"criterion_name": "CrossEntropyCriterion", "optimizer_name": "Adam",
             "lr_scheduler_state": {"best": None}, "num_updates": 0}],
         "extra_state": {}}, str(path))  # fmt: skip
