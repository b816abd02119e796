"""Parameter names -> (layer, operation): checked on the real models' parameter names."""
from fairseq.models.transformer import TransformerConfig
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

from fairseq_normformer.instrumentation.param_groups import OPERATIONS, param_group
from fairseq_normformer.modules import LayerConfig, NormFormerLayer

ALL_SWITCHES = dict(scale_attn=True, scale_fc=True, scale_heads=True, scale_resids=True, scale_qkv=True)


def test_every_parameter_of_our_layer_has_its_operation():
    layer = NormFormerLayer(LayerConfig(32, 48, 4, **ALL_SWITCHES))
    for name, _ in layer.named_parameters():
        group = param_group(f"decoder.layers.7.{name}")
        assert group.layer == 7 and group.key == f"layers.7.{name}" and group.local == name
        # the operation is the module path (or the bare parameter for head_scale / w_resid)
        expected = name if name in ("w_resid", "self_attn.head_scale") else name.rsplit(".", 1)[0]
        assert group.operation == expected and expected in OPERATIONS


def test_fairseq_builtin_normformer_layer_names_map_to_the_same_operations():
    """fairseq's own decoder layer with its NormFormer switches (HeadScale is its 'c_attn')."""
    cfg = TransformerConfig()
    cfg.decoder.embed_dim, cfg.decoder.ffn_embed_dim, cfg.decoder.attention_heads = 32, 48, 4
    for switch in ("scale_attn", "scale_fc", "scale_heads", "scale_resids"):
        setattr(cfg, switch, True)
    layer = TransformerDecoderLayerBase(cfg, no_encoder_attn=True)
    operations = {param_group(f"decoder.layers.0.{name}").operation for name, _ in layer.named_parameters()}
    assert None not in operations
    assert {"attn_ln", "ffn_layernorm", "self_attn.head_scale", "w_resid"} <= operations


def test_wrappers_are_dropped_and_outside_parameters_keep_their_name():
    wrapped = "module.decoder.layers.3._fsdp_wrapped_module._fpw_module._checkpoint_wrapped_module.fc2.weight"
    assert param_group(wrapped) == param_group("decoder.layers.3.fc2.weight")
    outside = param_group("module.decoder.embed_tokens.weight")
    assert (outside.key, outside.layer, outside.operation) == ("decoder.embed_tokens.weight", None, None)
