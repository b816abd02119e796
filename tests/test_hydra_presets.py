"""examples/hydra/model/: the committed preset configs are what the generator writes from the presets now,
and fairseq-hydra-train's config with ``model=<preset>`` builds the model config ``fairseq-train --arch
<preset>`` builds (both composed in process, as each CLI does, up to the model's build_model). The
refusal of ``model._name=<preset>`` (which would build the dataclass's defaults) is checked through
the callback hydra calls before the launch."""
import dataclasses

import pytest
from fairseq import options
from fairseq.dataclass.initialize import add_defaults, hydra_init
from fairseq.dataclass.utils import merge_with_parent
from fairseq.models import ARCH_CONFIG_REGISTRY, MODEL_DATACLASS_REGISTRY
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from fairseq_normformer import checks
from fairseq_normformer.hydra_callback import check_model_name
from fairseq_normformer.hydra_presets import CONFIG_DIR, write_presets

from .conftest import REPO_ROOT, fairseq_config

PRIMARY = "normformer_lm_tiny"  # examples/hydra/normformer_lm_tiny.yaml: its task section is the --task flags below
TASK_FLAGS = ["--task", "language_modeling", "--tokens-per-sample", "64", "--sample-break-mode", "none"]
HAND_WRITTEN = {"normformer_lm_tiny.yaml"}


def test_the_committed_configs_are_what_the_generator_writes(tmp_path):
    generated = {path.name: path.read_text() for path in write_presets(tmp_path)}
    committed = {path.name: path.read_text() for path in CONFIG_DIR.glob("*.yaml") if path.name not in HAND_WRITTEN}
    assert committed == generated and "normformer_lm_gpt3_small.yaml" in generated


def hydra_model_config(data_bin, arch):
    """fairseq-hydra-train's composition (hydra_init, the command line's config, add_defaults, the resolved
    copy) and build_model's merge with the model's dataclass."""
    hydra_init(PRIMARY)  # version_base 1.1: what fairseq-hydra-train (and fairseq-train's own compose) runs with
    with initialize_config_dir(config_dir=str(REPO_ROOT / "examples/hydra"), version_base="1.1"):
        cfg = compose(PRIMARY, [f"model={arch}", f"task.data={data_bin}", "common.user_dir=x", "checkpoint.save_dir=x"])
    add_defaults(cfg)
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    return merge_with_parent(MODEL_DATACLASS_REGISTRY[cfg.model._name](), cfg.model)


def fairseq_train_args(data_bin, *flags):
    return options.parse_args_and_arch(options.get_training_parser(), [str(data_bin), *flags])


# One of each preset function: the GPT-3 sizes with and without the operations, Baevski & Auli's (adaptive
# input and softmax). ~1 s each; the generator runs the same code for every preset.
@pytest.mark.parametrize("arch", ["normformer_lm_gpt3_small", "preln_lm_gpt3_2_7", "normformer_lm_wiki103"])
def test_a_preset_config_builds_what_the_arch_flag_builds(tiny_lm_corpus, arch):
    from_hydra = hydra_model_config(tiny_lm_corpus.data_bin, arch)
    from_flags = fairseq_config(fairseq_train_args(tiny_lm_corpus.data_bin, *TASK_FLAGS, "--arch", arch)).model
    assert (from_hydra._name, from_flags._name) == ("normformer_lm", arch)  # the model, and its preset's name
    differing = {field.name: (from_hydra[field.name], from_flags[field.name])
                 for field in dataclasses.fields(MODEL_DATACLASS_REGISTRY["normformer_lm"])
                 if field.name != "_name" and from_hydra[field.name] != from_flags[field.name]}  # fmt: skip
    assert differing == {} and from_hydra.decoder_layers == from_flags.decoder_layers > 2  # not the tiny model


def test_a_preset_as_model_name_is_refused_with_its_config():
    with pytest.raises(checks.BadInput, match=r"^model._name=preln_lm_gpt3_small is an --arch preset, .*; use its "
                                              r"config instead: model=preln_lm_gpt3_small with --config-dir"):  # fmt: skip
        check_model_name(OmegaConf.create({"model": {"_name": "preln_lm_gpt3_small", "decoder_layers": 2}}))
    for accepted in ("normformer_lm", "normformer_roberta_base", "preln_bert_base"):  # a model; argparse-configured presets
        check_model_name(OmegaConf.create({"model": {"_name": accepted}}))


def test_an_argparse_configured_preset_as_model_name_applies_the_preset(tiny_lm_corpus):
    """Why the masked LMs need no config files: without a dataclass, add_defaults adds nothing and fairseq's
    build_model runs the preset on what the config set (here encoder_layers), as --arch does on the flags."""
    cfg = OmegaConf.create({"model": {"_name": "normformer_roberta_base", "encoder_layers": 2}})
    add_defaults(cfg)
    with open_dict(cfg.model):
        ARCH_CONFIG_REGISTRY["normformer_roberta_base"](cfg.model)  # fairseq's build_model, for a model without one
    args = fairseq_train_args(tiny_lm_corpus.data_bin, "--task", "masked_lm", "--arch", "normformer_roberta_base",
                              "--encoder-layers", "2")  # fmt: skip
    differing = {key: (value, getattr(args, key)) for key, value in cfg.model.items()
                 if key != "_name" and value != getattr(args, key)}  # fmt: skip
    model = cfg.model
    assert differing == {} and (model.encoder_layers, model.encoder_embed_dim, model.scale_attn) == (2, 768, True)
