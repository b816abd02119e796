"""Build normformer_roberta / normformer_bert from command-line flags, in-process, as fairseq-train does."""
import types

from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY

import fairseq_normformer  # noqa: F401  (registers the models)
from tests.conftest import fairseq_config

TINY_ENCODER = ["--encoder-layers", "2", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "48",
                "--encoder-attention-heads", "4", "--dropout", "0", "--attention-dropout", "0",
                "--tokens-per-sample", "32"]  # fmt: skip


def dictionary_with_mask(size=60):
    """A fairseq Dictionary (<s>=0 <pad>=1 </s>=2 <unk>=3) with ``size`` words and <mask>."""
    d = Dictionary()
    for i in range(size):
        d.add_symbol(f"\u2581w{i}" if i % 2 == 0 else f"w{i}")
    d.add_symbol("<mask>")
    return d


def fake_task(dictionary, max_positions=32):
    return types.SimpleNamespace(
        source_dictionary=dictionary, target_dictionary=dictionary, max_positions=lambda: max_positions
    )


def build_encoder_model(arch, dictionary, flags=TINY_ENCODER, task=("--task", "masked_lm")):
    """``task``: the task (and criterion) flags, whose options the model may read (mlm_nsp's --no-nsp)."""
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, ["unused-data-dir", *task, "--arch", arch] + list(flags))
    cfg = fairseq_config(args)
    return ARCH_MODEL_REGISTRY[arch].build_model(cfg.model, fake_task(dictionary))
