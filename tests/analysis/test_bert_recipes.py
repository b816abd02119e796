"""The BERT recipes' commands (DRY_RUN=1), read back with fairseq's own parsers: the length schedule's
two phases (recipes/bert_length_schedule.sh) and the Table 5 ablation rows (recipes/bert_table5_ablations.sh)
at both scales, with BERT's settings of fairseq_normformer/paper.py at paper scale."""
import os
import subprocess
import sys

import pytest
from fairseq import options

from fairseq_normformer.paper import BERT
from tests.conftest import REPO_ROOT, recorded_commands

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

ENV = {"DRY_RUN": "1", "GLUE_DIR": "/d/glue", "SPM_MODEL": "/d/spm.model", "PY": sys.executable}


@pytest.fixture(scope="module")
def commands(tmp_path_factory):
    """{(recipe, scale): [argv of each fairseq command]} that DRY_RUN=1 wrote to commands.sh (the four
    dry runs side by side: each spends its time starting Python for the paper's settings)."""
    out, runs = tmp_path_factory.mktemp("bert_recipes"), {}
    for recipe in ("bert_length_schedule", "bert_table5_ablations"):
        for scale in ("paper", "tiny"):
            cmd = ["bash", REPO_ROOT / "recipes" / f"{recipe}.sh", scale, out / f"{recipe}-{scale}"]
            with open(out / f"{recipe}-{scale}.log", "w") as log:  # a file: a full pipe would block the run
                data = {"DATA": "/d/data-bin"} if scale == "paper" else {}  # read at paper scale only
                runs[recipe, scale] = subprocess.Popen(cmd, env={**os.environ, **ENV, **data}, stdout=log, stderr=log)
    found = {}
    for (recipe, scale), process in runs.items():
        assert process.wait() == 0, (out / f"{recipe}-{scale}.log").read_text()[-3000:]
        argvs = recorded_commands(out / f"{recipe}-{scale}" / "commands.sh")
        found[recipe, scale] = [a for a in argvs if os.path.basename(a[0]).startswith("fairseq-")]
    return found


def parse(argv):
    """fairseq's parse of one fairseq-train or fairseq-validate command."""
    parser = options.get_training_parser() if argv[0].endswith("fairseq-train") else options.get_validation_parser()
    return options.parse_args_and_arch(parser, argv[1:])


def updates_of_a_batch(args) -> int:
    return args.distributed_world_size * args.batch_size * args.update_freq[0]


@pytest.mark.parametrize("scale", ["paper", "tiny"])
def test_length_schedule_trains_90_percent_at_128_then_restores_it_at_512(commands, scale):
    train = [parse(a) for a in commands["bert_length_schedule", scale] if a[0].endswith("fairseq-train")]
    assert len(train) == 2
    phase1, phase2 = train
    total = phase2.max_update
    assert int(phase1.total_num_update) == int(phase2.total_num_update) == total  # one LR schedule, both phases
    assert phase1.max_update == total * 9 // 10 and (scale == "tiny" or total == BERT["max_update"])
    assert (phase1.tokens_per_sample, phase2.tokens_per_sample) == (128, 512)
    assert phase1.max_positions == phase2.max_positions == 512  # positions for 512 from the start
    assert phase2.restore_file == os.path.join(phase1.save_dir, "checkpoint_last.pt")
    assert phase2.reset_dataloader and not (phase2.reset_optimizer or phase2.reset_lr_scheduler)
    assert phase1.arch == phase2.arch == BERT["arch"] and phase1.lr == phase2.lr
    if scale == "paper":
        assert updates_of_a_batch(phase1) == BERT["batch_size"] and phase1.lr == [BERT["lr"]]
    evals = [parse(a) for a in commands["bert_length_schedule", scale] if a[0].endswith("fairseq-validate")]
    assert sorted((e.path, e.model_overrides.split(",")[0]) for e in evals) == [
        (os.path.join(phase.save_dir, "checkpoint_last.pt"), f"{{'tokens_per_sample': {n}")
        for phase in (phase1, phase2) for n in (128, 512)
    ]  # fmt: skip


@pytest.mark.parametrize("scale", ["paper", "tiny"])
def test_table5_rows_share_data_size_and_budget_and_fine_tune_their_own_checkpoint(commands, scale):
    train = [parse(a) for a in commands["bert_table5_ablations", scale]]
    pretrain = [a for a in train if a.task != "sentence_prediction"]
    mlm_nsp, no_nsp, ltr = pretrain
    assert (mlm_nsp.task, no_nsp.task, ltr.task) == ("mlm_nsp", "mlm_nsp", "language_modeling")
    assert (mlm_nsp.no_nsp, no_nsp.no_nsp) == (False, True) and ltr.arch == "normformer_lm"
    for name in ("data", "max_update", "batch_size", "update_freq", "tokens_per_sample", "lr", "seed", "dropout"):
        assert getattr(mlm_nsp, name) == getattr(no_nsp, name) == getattr(ltr, name), name
    for name in ("layers", "embed_dim", "ffn_embed_dim", "attention_heads"):
        assert getattr(mlm_nsp, f"encoder_{name}") == getattr(ltr, f"decoder_{name}"), name
    assert ltr.post_ln and ltr.layernorm_embedding and ltr.activation_fn == "gelu"  # BERT's layer layout
    finetune = [a for a in train if a.task == "sentence_prediction"]
    lrs = 2 if scale == "tiny" else len(BERT["finetune_lrs"]) * 4  # paper: 4 GLUE tasks
    assert len(finetune) == 3 * lrs
    for row, model in zip(pretrain, (mlm_nsp, no_nsp, ltr)):
        runs = [a for a in finetune if a.restore_file == os.path.join(row.save_dir, "checkpoint_last.pt")]
        assert len(runs) == lrs and all(a.reset_optimizer for a in runs)
        assert {a.arch for a in runs} == {"normformer_lm_classifier" if row is ltr else BERT["arch"]}
