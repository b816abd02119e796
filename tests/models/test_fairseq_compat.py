"""normformer_lm reproduces fairseq's own transformer_lm (built where its --scale-* flags work)."""
import pytest
import torch
from fairseq import checkpoint_utils

from fairseq_normformer.models.fairseq_compat import convert_checkpoint, detect_operations

from .lm_builders import TINY, converted_fairseq_pair, fairseq_transformer_lm, num_params, randomize_, tiny_dictionary
from .lm_builders import save_fairseq_checkpoint

CASES = {
    "pre_ln": ([], False),
    "post_ln": ([], True),
    "normformer_after_wo": (["--scale-attn", "--scale-fc", "--scale-heads"], False),
    "scale_resids": (["--scale-resids"], False),
    "all_post_ln": (["--scale-attn", "--scale-fc", "--scale-heads", "--scale-resids"], True),
}


@pytest.mark.parametrize("case", CASES)
def test_converted_model_has_fairseq_logits(case):
    flags, post_ln = CASES[case]
    dictionary = tiny_dictionary()
    theirs, ours = converted_fairseq_pair(dictionary, TINY + flags, post_ln=post_ln)
    assert num_params(ours) == num_params(theirs)

    tokens = torch.randint(dictionary.nspecial, len(dictionary), (3, 16), generator=torch.Generator().manual_seed(1))
    diff = (ours(tokens)[0] - theirs(tokens)[0]).abs().max().item()
    assert diff <= 1e-5, f"{case}: max |Δlogit| = {diff}"


def test_operations_come_from_the_weights():
    dictionary = tiny_dictionary()
    _, built = fairseq_transformer_lm(dictionary, TINY + ["--scale-attn", "--scale-heads"])
    assert detect_operations(built.state_dict()) == {
        "scale_attn": True, "scale_fc": False, "scale_heads": True, "scale_resids": False}
    with pytest.raises(ValueError, match="decoder.layers.0"):
        detect_operations({"encoder.weight": torch.zeros(1)})


def test_convert_cli_round_trip(tmp_path):
    """The console script converts a checkpoint file; fairseq's loader then builds our model from it."""
    from fairseq_normformer.cli.convert_fairseq_lm import main

    dictionary = tiny_dictionary()
    data = tmp_path / "data"
    data.mkdir()
    dictionary.save(str(data / "dict.txt"))
    args, theirs = fairseq_transformer_lm(dictionary, TINY + ["--scale-attn", "--scale-fc", "--scale-heads"])
    args.data = str(data)
    randomize_(theirs)
    src, dst = tmp_path / "fairseq.pt", tmp_path / "normformer.pt"
    save_fairseq_checkpoint(src, args, theirs)

    main([str(src), str(dst)])
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(dst)])
    ours = models[0]
    assert type(ours).__name__ == "NormFormerLanguageModel"
    assert cfg.model.head_scale_position == "after_wo"
    tokens = torch.randint(4, len(task.dictionary), (2, 12), generator=torch.Generator().manual_seed(2))
    theirs.eval(), ours.eval()
    assert (ours(tokens)[0] - theirs(tokens)[0]).abs().max().item() <= 1e-5

    before = dst.read_bytes()
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        convert_checkpoint(str(src), str(dst))
    assert dst.read_bytes() == before
