"""The fine-tuning recipes' commands (DRY_RUN=1): every fairseq-train command parses with fairseq's
parser and carries BERT's fine-tuning settings (recipes/bert_finetune.sh), and the tiny recipe's
pre-trained and from-scratch runs differ only in the checkpoint they start from."""
import os
import subprocess
import sys

from fairseq import options

from tests.conftest import REPO_ROOT, recorded_commands

# task: lr, batch size, epochs, training examples (BERT §4.2-4.4, Appendix A.3)
BERT = {"squad1": (5e-5, 32, 3, 87_599), "squad2": (5e-5, 48, 2, 130_319), "conll": (5e-5, 32, 3, 14_041),
        "swag": (2e-5, 16, 3, 73_546)}  # fmt: skip
RESTORE = ("--restore-file", "--reset-optimizer", "--reset-dataloader", "--reset-meters")


def dry_run(recipe: str, out, env: dict) -> list:
    env = {**os.environ, "DRY_RUN": "1", "PY": sys.executable, **env}
    subprocess.run(["bash", REPO_ROOT / "recipes" / f"{recipe}.sh", *([out] if recipe == "finetune_tiny" else [])],
                   env=env, check=True, capture_output=True)  # fmt: skip
    return recorded_commands(out / "commands.sh")


def train_args(argv):
    return options.parse_args_and_arch(options.get_training_parser(), argv[1:])


def test_bert_finetune_uses_the_papers_hyperparameters(tmp_path):
    env = {"CHECKPOINT": "/c.pt", "ARCH": "normformer_bert_base", "DATA_BIN": "/d", "SPM_MODEL": "/s.model",
           "OUT": str(tmp_path), "SQUAD1_DIR": "/sq1", "SQUAD2_DIR": "/sq2", "CONLL_DIR": "/conll",
           "SWAG_DIR": "/swag"}  # fmt: skip
    commands = dry_run("bert_finetune", tmp_path, env)
    trains = [train_args(c) for c in commands if os.path.basename(c[0]) == "fairseq-train"]
    assert [a.task for a in trains] == ["extractive_qa", "extractive_qa", "token_classification", "sentence_ranking"]
    for args, (lr, batch, epochs, examples) in zip(trains, BERT.values()):
        assert (args.lr[0], args.batch_size) == (lr, batch)
        assert args.max_update == int(args.total_num_update) == -(-epochs * examples // batch)
        assert args.warmup_updates == args.max_update // 10 and args.restore_file == "/c.pt" and args.reset_optimizer
    assert trains[1].version_2_with_negative and (trains[0].max_seq_length, trains[0].doc_stride) == (384, 128)
    predicts = [c for c in commands if c[1:3] == ["-m", "fairseq_normformer.cli.predict"]]
    assert [c[3] for c in predicts] == ["qa", "qa", "tags"] and "--tune-threshold" in predicts[1]
    assert any(c[1:3] == ["-m", "fairseq_normformer.cli.swag_data"] and "/swag" in c for c in commands)


def test_bert_finetune_needs_its_data(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SQUAD1_DIR"}
    result = subprocess.run(["bash", REPO_ROOT / "recipes" / "bert_finetune.sh"], capture_output=True, text=True,
                            env={**env, "DRY_RUN": "1", "PY": sys.executable, "CHECKPOINT": "/c", "ARCH": "a",
                                 "DATA_BIN": "/d", "SPM_MODEL": "/s", "OUT": str(tmp_path),
                                 "TASKS": "squad1"})  # fmt: skip
    assert result.returncode != 0 and "set SQUAD1_DIR" in result.stderr


def test_tiny_recipe_compares_the_same_runs_with_and_without_pretraining(tmp_path):
    commands = dry_run("finetune_tiny", tmp_path, {})
    trains = [c for c in commands if os.path.basename(c[0]) == "fairseq-train"]
    assert train_args(trains[0]).task == "mlm_nsp"
    by_task = {}
    for argv in trains[1:]:
        init = "pretrained" if "--restore-file" in argv else "scratch"
        without = [a for i, a in enumerate(argv) if a not in RESTORE and argv[i - 1] != "--restore-file"]
        by_task.setdefault(train_args(argv).task, {})[init] = [a.replace("/pretrained/", "/") for a in without]
    assert sorted(by_task) == ["extractive_qa", "sentence_ranking", "token_classification"]
    for runs in by_task.values():
        pretrained = [a for a in runs["pretrained"] if "/pretrained" not in a]
        assert pretrained == [a for a in runs["scratch"] if "/scratch" not in a]
