"""recipes/xiong_warmup_study.sh (DRY_RUN=1): the four runs of Xiong et al.'s warmup study with the
settings of fairseq_normformer/paper.py, and every command parses with fairseq's and our parsers."""
import os
import subprocess
import sys

import pytest
from fairseq import options

from fairseq_normformer.cli.analyze import build_parser
from fairseq_normformer.paper import XIONG_RUNS
from tests.conftest import REPO_ROOT, recorded_commands

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

MODELS = {"postln": (True, False), "preln": (False, False), "normformer": (False, True)}  # post_ln, scale_attn


def dry_run(scale, out):
    env = {**os.environ, "DRY_RUN": "1", "PY": sys.executable, **({"DATA": "/nonexistent/iwslt14"} if scale == "paper" else {})}
    subprocess.run(["bash", REPO_ROOT / "recipes" / "xiong_warmup_study.sh", scale, out], env=env, check=True,
                   capture_output=True)  # fmt: skip
    return recorded_commands(out / "commands.sh")


@pytest.mark.parametrize("scale", ["paper", "tiny"])
def test_four_runs_with_xiong_settings(scale, tmp_path):
    commands = dry_run(scale, tmp_path)
    trains = [options.parse_args_and_arch(options.get_training_parser(), argv[1:])
              for argv in commands if os.path.basename(argv[0]) == "fairseq-train"]  # fmt: skip
    assert len(trains) == len(XIONG_RUNS)
    for args, (run, (model, lr, warmup, decay)) in zip(trains, XIONG_RUNS.items()):
        assert args.save_dir == str(tmp_path / run / "checkpoints")
        assert (args.post_ln, args.scale_attn and args.scale_fc and args.scale_heads) == MODELS[model]
        assert args.lr == [lr if scale == "paper" else 1e-3] and args.lr_scheduler == "inverse_sqrt_any_warmup" and args.share_all_embeddings
        assert args.warmup_updates == (warmup if scale == "paper" or warmup == 0 else 100)
        assert args.decay_per == decay == ("update" if warmup else "epoch")  # Xiong Sec. 4.1: lr / sqrt(epoch)
        assert args.eval_bleu and '"lenpen": 1.2' in args.eval_bleu_args and args.best_checkpoint_metric == "bleu"
        assert (args.encoder_layers, args.decoder_layers) == (6, 6)
        assert args.encoder_embed_dim == (512 if scale == "paper" else 64)
    generates = [options.parse_args_and_arch(options.get_generation_parser(), argv[1:])
                 for argv in commands if os.path.basename(argv[0]) == "fairseq-generate"]  # fmt: skip
    assert len(generates) == len(XIONG_RUNS)
    assert all(g.beam == 5 and g.lenpen == 1.2 and g.scoring == "sacrebleu" and g.gen_subset == "test" for g in generates)
    # test BLEU over every test pair: none skipped for its length, none dropped in a last batch
    assert not any(g.skip_invalid_size_inputs_valid_test or g.required_batch_size_multiple != 1 for g in generates)
    analyses = [argv[3:] for argv in commands if argv[1:3] == ["-m", "fairseq_normformer.cli.analyze"]]
    assert [a[0] for a in analyses] == ["init-grads"] * 3 + ["init-grads-plot", "bleu-table"]
    for argv in analyses:
        build_parser().parse_args(argv[: argv.index("--") if "--" in argv else None])
    for argv in analyses[:3]:
        options.parse_args_and_arch(options.get_training_parser(), [argv[1], *argv[argv.index("--") + 1 :]])

