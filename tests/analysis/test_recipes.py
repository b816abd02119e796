"""The recipes' commands (DRY_RUN=1): every fairseq command parses with fairseq's own parsers, and
paper-scale runs see the paper's tokens per update."""
import os
import subprocess
import sys

import pytest
from fairseq import options

from fairseq_normformer import paper
from fairseq_normformer.runs.lr_stability import stability_command
from fairseq_normformer.cli.analyze import build_parser
from fairseq_normformer.runs.run_dir import THREAD_VARIABLES
from tests.conftest import REPO_ROOT, recorded_command, recorded_commands
from tests.runs.test_paper_settings import expected, train_settings

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

RECIPES = ["fig2_time_to_target", "fig3_grad_norms", "fig4_gamma", "fig5_grad_ratio", "table3_lr_stability",
           "table5_ablations", "table6_sizes", "table7_hparams", "table8_wikitext103", "norm_bench"]  # fmt: skip
SCALES = ("paper", "tiny", "small")
RECIPE_SCALES = {"table6_sizes": ("paper", "tiny"), "table8_wikitext103": ("paper", "tiny"),  # their own shapes
                 "norm_bench": ("tiny", "small")}  # fmt: skip
# Paper: 0.5M tokens per update for 125M and 355M, 1M above (examples/normformer/README.md)
PAPER_TOKENS = {"gpt3_small": 2**19, "gpt3_medium": 2**19, "gpt3_xl": 2**20, "gpt3_2_7": 2**20}


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """{(recipe, scale): its commands.sh} written by DRY_RUN=1, with no thread settings in the environment."""
    out, found = tmp_path_factory.mktemp("recipes"), {}
    env = {**{k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}, "DRY_RUN": "1",
           "PAIR": str(out / "pair"), "PY": sys.executable}  # fmt: skip
    for recipe in RECIPES:
        for scale in RECIPE_SCALES.get(recipe, SCALES):
            run_dir = out / f"{recipe}-{scale}"
            data = {"DATA": "/nonexistent/data-bin"} if scale == "paper" else {}  # read at paper scale only
            subprocess.run(["bash", REPO_ROOT / "recipes" / f"{recipe}.sh", scale, run_dir], env={**env, **data},
                           check=True, capture_output=True)  # fmt: skip
            found[recipe, scale] = run_dir / "commands.sh"
    return found


@pytest.fixture(scope="module")
def commands(logs):
    """{(recipe, scale): [argv of each command]}."""
    return {key: recorded_commands(path) for key, path in logs.items()}


def test_commands_sh_starts_with_the_threads_the_recipe_runs_with(logs):
    """tiny and small runs are single-threaded (OMP_NUM_THREADS=1 unless set); paper runs keep the environment's."""
    for (recipe, scale), path in logs.items():
        threads = ["unset OMP_NUM_THREADS"] if scale == "paper" else ["export OMP_NUM_THREADS=1"]
        assert path.read_text().splitlines()[:2] == threads + ["unset MKL_NUM_THREADS"], (recipe, scale)


def fairseq_train_args(argv):
    if os.path.basename(argv[0]) == "fairseq-train":
        return argv[1:]
    if os.path.basename(argv[0]) == "normformer-analyze" and argv[1] == "lr-stability":
        cut = argv.index("--")
        args = build_parser().parse_args(argv[1:cut])
        cmd = stability_command(args.data, args.out_dir, args.peak_lr, args.warmup_updates, args.threshold, argv[cut + 1 :])
        return cmd[cmd.index("fairseq_cli.train") + 1 :]
    return None


def test_every_recipe_runs_fairseq_with_arguments_fairseq_accepts(commands):
    for (recipe, scale), argvs in commands.items():
        train = [a for a in map(fairseq_train_args, argvs) if a is not None]
        assert train, (recipe, scale)
        for argv in train:
            args = options.parse_args_and_arch(options.get_training_parser(), argv)
            assert args.task == "language_modeling_analysis"
            if scale == "paper" and args.arch.startswith(("preln_lm_gpt3", "normformer_lm_gpt3")):
                size = args.arch.split("_lm_", 1)[1]
                tokens = args.distributed_world_size * args.batch_size * args.tokens_per_sample * args.update_freq[0]
                assert tokens == PAPER_TOKENS[size], (recipe, args.arch)
        for argv in argvs:
            if os.path.basename(argv[0]) == "fairseq-eval-lm":
                options.parse_args_and_arch(options.get_eval_lm_parser(), argv[1:])
            elif os.path.basename(argv[0]) == "normformer-analyze":
                build_parser().parse_args(argv[1 : argv.index("--") if "--" in argv else None])


def test_table5_rows_switch_exactly_their_operations(commands):
    switches = ("scale_attn", "scale_fc", "scale_heads", "scale_resids", "scale_qkv")
    for scale in SCALES:
        rows = []
        for argv in commands["table5_ablations", scale]:
            if os.path.basename(argv[0]) == "fairseq-train":
                args = options.parse_args_and_arch(options.get_training_parser(), argv[1:])
                rows.append(tuple(s[6:] for s in switches if getattr(args, s, False)))
        assert rows == [(), ("attn", "fc", "heads"), ("fc", "heads"), ("attn", "heads"), ("attn", "fc"),
                        ("attn", "fc", "heads", "resids"), ("attn", "fc", "heads", "qkv")]  # fmt: skip


def test_the_figure_recipes_and_table5_train_the_papers_125m_pair(commands):
    """Figs. 2-5 train the same baseline/NormFormer pair, Table 5's baseline row is it too, and its NormFormer
    rows share one LR: all as fairseq_normformer/paper.py says (WORLD_SIZE 8, the default)."""
    def trained(recipe):
        return [train_settings(argv[1:]) for argv in commands[recipe, "paper"]
                if os.path.basename(argv[0]) == "fairseq-train"]  # fmt: skip

    want = [expected("figs", "125M", model, 8) for model in paper.MODELS]
    for recipe in ("fig2_time_to_target", "fig3_grad_norms", "fig4_gamma", "fig5_grad_ratio"):
        assert trained(recipe) == want, recipe
    table5 = trained("table5_ablations")
    assert table5[0] == expected("5", "125M", "baseline", 8)
    assert {row[1] for row in table5[1:]} == {paper.settings("5", "125M", "normformer", 8)["lrs"][0]}


def test_small_scale_trains_4_layers_of_256_on_the_python_manual(commands):
    for (recipe, scale), argvs in commands.items():
        for argv in filter(None, map(fairseq_train_args, argvs)):
            args = options.parse_args_and_arch(options.get_training_parser(), argv)
            shape = (args.decoder_layers, args.decoder_embed_dim, args.decoder_ffn_embed_dim)
            assert (shape == (4, 256, 1024)) == (scale == "small"), (recipe, scale, shape)
            assert args.data.endswith("corpus-pydocs-v2000/data-bin") == (scale == "small"), (recipe, args.data)


def test_recipes_refuse_the_scales_they_do_not_have(tmp_path):
    for recipe, scales in RECIPE_SCALES.items():
        for scale in set(SCALES) - set(scales):
            result = subprocess.run(["bash", REPO_ROOT / "recipes" / f"{recipe}.sh", scale, tmp_path / recipe],
                                    env={**os.environ, "DRY_RUN": "1"}, capture_output=True, text=True)  # fmt: skip
            assert result.returncode == 2 and f"usage: " in result.stderr, result.stderr
            assert f"[{'|'.join(scales)}]" in result.stderr, result.stderr


@pytest.mark.parametrize("recipe, scale, line", [
    ("norm_bench", "tiny", "norm_bench.sh: DATA is set, but this recipe does not read it: unset DATA"),
    ("table5_ablations", "tiny", "table5_ablations.sh tiny: DATA is read at paper scale only (tiny builds its own "
                                 "corpus): unset DATA or run paper"),
    ("tiny_mlm_nsp", "", "tiny_mlm_nsp.sh: DATA is set, but this recipe does not read it: unset DATA"),
])  # fmt: skip
def test_recipes_refuse_a_data_they_would_ignore(tmp_path, recipe, scale, line):
    """Issue 53: DATA=... recipes/norm_bench.sh tiny trained on the built-in corpus without a word."""
    result = subprocess.run(["bash", REPO_ROOT / "recipes" / f"{recipe}.sh", *([scale] if scale else []), tmp_path / "out"],
                            env={**os.environ, "DRY_RUN": "1", "PY": sys.executable, "DATA": "/my/data-bin"},
                            capture_output=True, text=True)  # fmt: skip
    assert (result.returncode, result.stderr) == (2, line + "\n")
    assert not (tmp_path / "out" / "commands.sh").exists()


# norm_bench's run directories and the switches each must have (the rest at their defaults)
NORM_BENCH_RUNS = {
    "grid/preln-": {}, "grid/postln-": {"post_ln": True},
    "grid/normformer-": {"scale_attn": True, "scale_fc": True, "scale_heads": True},
    "grid/sandwich-": {"sandwich_norm": True}, "grid/qknorm-": {"qk_norm": True}, "grid/rmsnorm-": {"norm_type": "rmsnorm"},
    "grid/dyt-": {"norm_type": "dyt"}, "grid/deepnorm-": {"post_ln": True, "deepnorm": True},
    "placement/first-half": {"scale_attn": True, "scale_fc": True, "scale_heads": True, "normformer_layers": "first:2"},
    "placement/second-half": {"scale_attn": True, "scale_fc": True, "scale_heads": True, "normformer_layers": "last:2"},
    "ffn_norm/layernorm_nobias": {"scale_attn": True, "scale_fc": True, "scale_heads": True,
                                  "ffn_norm_type": "layernorm_nobias"},
    "ffn_norm/rmsnorm": {"scale_attn": True, "scale_fc": True, "scale_heads": True, "ffn_norm_type": "rmsnorm"},
}  # fmt: skip
SCHEME_SWITCHES = {"post_ln": False, "scale_attn": False, "scale_fc": False, "scale_heads": False, "sandwich_norm": False,
                   "qk_norm": False, "norm_type": "layernorm", "deepnorm": False, "normformer_layers": "all",
                   "ffn_norm_type": None}  # fmt: skip


def test_norm_bench_runs_switch_exactly_their_schemes_operations(commands):
    seen = set()
    for argv in commands["norm_bench", "small"]:
        if os.path.basename(argv[0]) != "fairseq-train":
            continue
        args = options.parse_args_and_arch(options.get_training_parser(), argv[1:])
        run = next(key for key in NORM_BENCH_RUNS if key in args.save_dir)
        expected = {**SCHEME_SWITCHES, **NORM_BENCH_RUNS[run]}
        # (fairseq's parser leaves a model option it was not given out of the namespace)
        assert {name: getattr(args, name, default) for name, default in SCHEME_SWITCHES.items()} == expected, run
        assert args.grad_norm_file == args.save_dir.replace("checkpoints", "grad_norms.jsonl")
        seen.add(run)
    assert seen == set(NORM_BENCH_RUNS)


def test_paper_scale_needs_data_and_a_whole_update_freq(tmp_path):
    env = {**{k: v for k, v in os.environ.items() if k != "DATA"}, "PY": sys.executable}
    script = REPO_ROOT / "recipes" / "table6_sizes.sh"
    result = subprocess.run(["bash", script, "paper", tmp_path / "a"], env={**env, "DRY_RUN": "1"},
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode != 0 and "set DATA" in result.stderr
    result = subprocess.run(["bash", script, "paper", tmp_path / "b"], capture_output=True, text=True,
                            env={**env, "DRY_RUN": "1", "DATA": "/d", "WORLD_SIZE": "3"})  # fmt: skip
    assert result.returncode != 0 and "3 GPUs x --batch-size 16 x 2048 tokens does not divide 524288 tokens" in result.stderr


def test_lambert_mnli_dry_run_prints_the_data_step_and_writes_no_data(tmp_path):
    """DRY_RUN=1 recipes/lambert_mnli.sh (and the table2_glue.sh it calls): every command, GLUE tokenization
    included, is printed and logged, none runs; the inputs need not exist and no data directory is written."""
    out, glue = tmp_path / "lambert", tmp_path / "glue"
    env = {**os.environ, "DRY_RUN": "1", "PY": sys.executable, "DATA_BIN": "/nonexistent/data-bin",
           "SPM_MODEL": "/nonexistent/spm.model", "GLUE_DIR": str(glue), "OUT": str(out)}  # fmt: skip
    result = subprocess.run(["bash", REPO_ROOT / "recipes" / "lambert_mnli.sh"], env=env, capture_output=True,
                            text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr
    argvs = recorded_commands(out / "finetune" / "commands.sh")
    # a Python script's name, else the console script's (`make test` runs a relative .venv/bin/python)
    scripts = [os.path.basename(a[1] if os.path.basename(a[0]).startswith("python") else a[0]) for a in argvs]
    assert scripts == ["sentence_prediction_data.py", "fairseq-train", "fairseq-train", "fairseq-train", "glue_table.py"]
    data = argvs[0][argvs[0].index("--out") + 1]
    assert argvs[0][2:5] == ["glue", "MNLI", f"{glue}/MNLI"] and data == f"{out}/finetune/data/MNLI"
    for argv in argvs[1:4]:
        args = options.parse_args_and_arch(options.get_training_parser(), argv[1:])
        assert (args.data, args.task, args.arch) == (data, "sentence_prediction", "lambert_base")
    assert "sentence_prediction_data.py glue MNLI" in result.stdout  # printed, as the training commands
    assert not (out / "finetune" / "data").exists() and not (out / "pretrain").exists()


def test_without_a_venv_the_recipes_run_the_python_on_path(tmp_path):
    """A checkout without .venv, an environment of the user's own active (its bin first on PATH): the
    recipe runs that Python and its console scripts."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("recipes", "fairseq_normformer"):
        (checkout / name).symlink_to(REPO_ROOT / name)
    env_bin = os.path.abspath(os.path.dirname(sys.executable))
    env = {**{k: v for k, v in os.environ.items() if k != "PY"}, "DRY_RUN": "1", "SEEDS": "2",
           "PATH": f"{env_bin}:{os.environ['PATH']}"}  # fmt: skip
    result = subprocess.run(["bash", checkout / "recipes" / "table5_ablations.sh", "tiny", tmp_path / "out"], env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr
    argvs = [recorded_command(line)[0] for line in result.stdout.splitlines()]
    assert len(argvs) == 1 + 2 * 7 + 1  # the corpus-build command, 7 rows x 2 seeds, then the table
    assert {os.path.dirname(argv[0]) for argv in argvs} == {env_bin}


def test_a_python_without_the_plugin_is_refused_in_one_line(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")  # imports nothing
    fake.chmod(0o755)
    scripts = [p for p in sorted((REPO_ROOT / "recipes").glob("*.sh")) if not p.name.startswith("_")]
    scripts += [REPO_ROOT / "examples" / "slurm" / name for name in ("train_lm.sbatch", "train_lm_torchrun.sh")]
    for script in scripts:
        result = subprocess.run(["bash", script, "tiny", tmp_path / "out"], env={**os.environ, "PY": str(fake)},
                                capture_output=True, text=True, cwd=REPO_ROOT)  # fmt: skip
        assert (result.returncode, result.stdout) == (2, ""), script.name
        assert result.stderr == (f"{script.name}: error: PY={fake} cannot import fairseq_normformer: set PY to the python "
                                 "of an environment that has it (bash scripts/install.sh path/to/python), or activate one\n")  # fmt: skip
    assert not (tmp_path / "out").exists()
