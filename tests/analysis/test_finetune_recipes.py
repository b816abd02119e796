"""The fine-tuning recipes' commands (DRY_RUN=1): every fairseq-train command parses with fairseq's
parser and carries BERT's fine-tuning settings (recipes/bert_finetune.sh), and the tiny recipe's
pre-trained and from-scratch runs differ only in the checkpoint they start from."""
import os
import subprocess
import sys

import pytest
from fairseq import options

from fairseq_normformer.cli.analyze import build_parser, parse
from tests.conftest import REPO_ROOT, recorded_commands

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

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


SMALL = ["--encoder-layers", "4", "--encoder-embed-dim", "256", "--encoder-ffn-embed-dim", "1024",
         "--encoder-attention-heads", "4"]  # fmt: skip
# each table row: its run directory under WORK/TASK, its arch and the recipes/mlm_small.sh run it starts from
ROWS = {"Pre-LN": ("pretrained-pre-ln", "preln_bert_base", "preln-lr2e-3"),
        "NormFormer": ("pretrained-normformer", "normformer_bert_base", "normformer-lr4e-3"),
        "preln_bert_base, from scratch": ("scratch-preln_bert_base", "preln_bert_base", None),
        "normformer_bert_base, from scratch": ("scratch-normformer_bert_base", "normformer_bert_base", None)}  # fmt: skip


def pretrained_elsewhere(tmp_path, seeds: int) -> dict:
    """The environment of finetune_tiny.sh for a corpus and recipes/mlm_small.sh's checkpoints of SEEDS seeds
    (empty files: a dry run only checks that they exist)."""
    corpus = tmp_path / "corpus"
    (corpus / "data-bin").mkdir(parents=True)
    (corpus / "spm.model").touch()
    (corpus / "data-bin" / "dict.txt").touch()
    for _, _, run in list(ROWS.values())[:2]:
        for seed in range(1, seeds + 1):
            checkpoints = tmp_path / "mlm" / run / ("" if seed == 1 else f"seed{seed}") / "checkpoints"
            checkpoints.mkdir(parents=True)
            (checkpoints / "checkpoint_last.pt").touch()
    pretrained = [f"{label}={arch}:{tmp_path}/mlm/{run}/{{seed}}/checkpoints/checkpoint_last.pt"
                  for label, (_, arch, run) in list(ROWS.items())[:2]]  # fmt: skip
    return {"CORPUS": str(corpus), "PRETRAINED": "\n  ".join(pretrained),  # entries on two lines, as in the docs
            "SIZE_FLAGS": " ".join(SMALL), "SEEDS": str(seeds)}


def test_tiny_recipe_fine_tunes_checkpoints_pretrained_elsewhere(tmp_path):
    work = tmp_path / "work"
    commands = dry_run("finetune_tiny", work, pretrained_elsewhere(tmp_path, seeds=2))
    assert not any(c[c.index("--format") + 1] == "bert" for c in commands if "--format" in c)  # no corpus built
    swag_data = next(c for c in commands if c[1:3] == ["-m", "fairseq_normformer.cli.swag_data"])
    assert swag_data[swag_data.index("--dict") + 1] == f"{tmp_path}/corpus/data-bin/dict.txt"
    by_dir = {run_dir: (arch, run) for run_dir, arch, run in ROWS.values()}
    shared, runs = {}, {}  # (task, seed): the flags all its runs share, its run directories
    for argv in (c for c in commands if os.path.basename(c[0]) == "fairseq-train"):
        args = train_args(argv)
        task, run_dir, *seed_dir = os.path.relpath(args.save_dir, work).split(os.sep)
        seed = int(seed_dir[0].removeprefix("seed")) if seed_dir else 1
        arch, run = by_dir[run_dir]
        assert args.seed == seed and args.arch == arch and argv[argv.index("--encoder-layers") :][: len(SMALL)] == SMALL
        assert task == "swag" or args.spm_model == f"{tmp_path}/corpus/spm.model"
        if run is None:
            assert "--restore-file" not in argv and not args.reset_optimizer
        else:
            seed_path = "" if seed == 1 else f"seed{seed}/"
            assert args.restore_file == f"{tmp_path}/mlm/{run}/{seed_path}checkpoints/checkpoint_last.pt"
            assert args.reset_optimizer and args.reset_dataloader and args.reset_meters
        with_value = ("--restore-file", "--arch", "--save-dir")
        same = [a for i, a in enumerate(argv) if a not in (*RESTORE, *with_value) and argv[i - 1] not in with_value]
        assert shared.setdefault((task, seed), same) == same
        runs.setdefault((task, seed), []).append(run_dir)
    assert {key: sorted(dirs) for key, dirs in runs.items()} == {
        (task, seed): sorted(by_dir) for task in ("qa", "ner", "swag") for seed in (1, 2)}  # fmt: skip
    tables = {os.path.relpath(c[c.index("--out") + 1], work): c for c in commands if "metric-table" in c}
    for task in ("qa", "ner", "swag"):
        rows = {"results.md": ["Pre-LN", "NormFormer", "preln_bert_base, from scratch", "normformer_bert_base, from scratch"],
                "pretraining-preln_bert_base.md": ["preln_bert_base, from scratch", "Pre-LN"],
                "pretraining-normformer_bert_base.md": ["normformer_bert_base, from scratch", "NormFormer"]}  # fmt: skip
        for out, labels in rows.items():
            table = tables.pop(f"{task}/{out}")
            args = parse(build_parser(), table[table.index("metric-table") :])  # --seeds expanded
            assert [f"{label}={path}" for label, path in args.run] == [
                f"{label}={work}/{task}/{ROWS[label][0]}{seed}/train.log" for label in labels for seed in ("", "/seed2")]
    assert not tables


def test_tiny_recipe_refuses_bad_pretrained_input_in_one_line(tmp_path):
    good = pretrained_elsewhere(tmp_path, seeds=1)
    corpus, checkpoint = good["CORPUS"], f"{tmp_path}/mlm/preln-lr2e-3/checkpoints/checkpoint_last.pt"
    cases = [({"PRETRAINED": good["PRETRAINED"]}, "PRETRAINED needs CORPUS=DIR, the corpus its checkpoints were pre-trained on"),
             ({"CORPUS": corpus}, f'CORPUS={corpus} needs PRETRAINED="LABEL=ARCH:CHECKPOINT ..." (nothing is pre-trained on it)'),
             ({**good, "PRETRAINED": f"Pre-LN={checkpoint}"}, f"PRETRAINED entry 'Pre-LN={checkpoint}' is not LABEL=ARCH:CHECKPOINT"),
             ({**good, "SEEDS": "2"}, f"Pre-LN's checkpoint for seed 2 not found: {tmp_path}/mlm/preln-lr2e-3/seed2/checkpoints/checkpoint_last.pt"),
             ({**good, "CORPUS": str(tmp_path / "mlm")}, f"CORPUS={tmp_path}/mlm has no spm.model"),
             ({**good, "PRETRAINED": f"A=preln_bert_base:{checkpoint} a=normformer_bert_base:{checkpoint}"},
              "PRETRAINED label 'a' is given twice (or in another case)")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("CORPUS", "PRETRAINED")}
    for case, message in cases:
        result = subprocess.run(["bash", REPO_ROOT / "recipes" / "finetune_tiny.sh", tmp_path / "work"], text=True,
                                env={**env, "DRY_RUN": "1", "PY": sys.executable, **case}, capture_output=True)  # fmt: skip
        assert (result.returncode, result.stderr) == (2, f"finetune_tiny.sh: error: {message}\n")
        assert not (tmp_path / "work").exists()
