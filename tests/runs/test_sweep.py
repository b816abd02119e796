"""normformer-sweep (runs/sweep.py, docs/cluster.md): a grid of real fairseq-train runs through submitit's
LocalExecutor, one of them signalled mid-run, requeued and resumed equal to an uninterrupted run of its point; a
rerun that submits nothing; the SLURM array through fake sbatch and sacct; the norm_bench spec's dry runs against
the commands the recipe recorded and the paper's 125M settings; normformer-analyze sweep against ppl-table."""
import json
import os
import re
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from fairseq_normformer.runs.sweep import widen_grid
from tests.conftest import REPO_ROOT, recorded_command, recorded_commands, run_cli
from tests.corpus.test_text import first_paragraphs
from tests.distributed.fairseq_runs import RUN_ENV, forked_commands, logged_updates

NORM_BENCH = REPO_ROOT / "recipes" / "sweeps" / "norm_bench.yaml"
COMMITTED = REPO_ROOT / "docs" / "results" / "small" / "norm_bench" / "commands.sh"
TINY_MODEL = ["--arch", "normformer_lm", "--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim",
              "64", "--decoder-attention-heads", "4"]  # fmt: skip
UPDATES, SIGNAL_AT = 30, 4
NORMFORMER = ["--scale-attn", "--scale-fc", "--scale-heads"]


def tiny_spec(path: Path, **extra) -> Path:
    """A 2 x 2 grid (Pre-LN and NormFormer at two LRs, one seed) of a 2-layer LM, 30 updates, validated at the end,
    every update's loss logged, the scale diagnostics every 10 updates."""
    spec = {
        "name": "tiny", "seeds": 1, "updates": UPDATES, "baseline": "preln",
        "scales": {"tiny": {"model": TINY_MODEL}},
        "train": ["--task", "language_modeling_analysis", "--tokens-per-sample", "32", "--batch-size", "4", "--optimizer",
                  "adam", "--max-update", "{updates}", "--num-workers", "0", "--cpu",
                  "--log-format", "json", "--log-interval", "1", "--no-epoch-checkpoints", "--save-interval-updates", "1000"],
        "schemes": {"preln": {"label": "Pre-LN", "flags": [], "lrs": ["1e-3", "3e-3"]},
                    "normformer": {"label": "NormFormer", "flags": NORMFORMER, "lrs": ["1e-3", "3e-3"]}},
        "point": ["--diagnostics-interval", "10", "--diagnostics-file", "{run_dir}/diagnostics.jsonl"],
        **extra,
    }  # fmt: skip
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def test_widen_grid_adds_the_next_lr_of_the_ladder_beyond_the_edge_of_the_best():
    ladder = ["1e-4", "3e-4", "1e-3", "3e-3", "6e-3"]
    assert widen_grid(["1e-3", "3e-3"], "lowest", ladder) == ["3e-4", "1e-3", "3e-3"]
    assert widen_grid(["1e-3", "3e-3"], "highest", ladder) == ["1e-3", "3e-3", "6e-3"]
    assert widen_grid(["1e-3", "3e-3", "6e-3"], "inside", ladder) == ["1e-3", "3e-3", "6e-3"]
    assert widen_grid(["3e-3", "6e-3"], "highest", ladder) == ["3e-3", "6e-3"]  # the ladder's end
    assert widen_grid(["1e-4", "3e-4"], "lowest", ladder) == ["1e-4", "3e-4"]


# --- dry runs of the norm_bench spec -------------------------------------------------------------------------
def points_of(lines, out: str) -> dict:
    """{run directory relative to the sweep: fairseq-train arguments} of commands.sh lines, the sweep's directory,
    the repository and the launcher's directory taken out of every path."""
    points = {}
    for line in lines:
        argv, log = recorded_command(line)
        if log is None or not argv[0].endswith("fairseq-train"):
            continue
        args = [a.replace(f"{out}/", "").replace(f"{REPO_ROOT}/", "") for a in argv[1:]]
        points[str(Path(log).parent).replace(f"{out}/", "")] = args
    return points


def test_the_norm_bench_spec_prints_the_commands_the_recipe_recorded(tmp_path):
    """docs/results/small/norm_bench/commands.sh: the commands recipes/norm_bench.sh small ran for the results
    page. Every point of the dry run that the recipe ran has the same flags; the dry run takes each grid's middle
    LR as its best, so the schemes whose best was another LR differ in their seeds' LR only."""
    out = tmp_path / "norm_bench-small"
    result = run_cli(["normformer-sweep", NORM_BENCH, "--scale", "small", "--dry-run", "--out", out])
    printed = points_of(result.stdout.splitlines(), str(out))
    committed = points_of(COMMITTED.read_text().splitlines(), "work/recipes/norm_bench-small")
    common = set(printed) & set(committed)
    assert {f"grid/{name}-lr{lr}" for name, s in yaml.safe_load(NORM_BENCH.read_text())["schemes"].items()
            for lr in s["lrs"]} <= common  # fmt: skip
    assert {"placement/first-half/seed3", "ffn_norm/rmsnorm/seed2"} <= common and len(common) == 46
    assert all(printed[p] == committed[p] for p in common), [p for p in common if printed[p] != committed[p]]
    assert len(printed) == 52 and not (out / "grid").exists()  # 24 grid runs, 16 seeds, 12 variants; nothing run
    assert recorded_commands(out / "commands.sh")[1:] == [recorded_command(line)[0] for line in result.stdout.splitlines()[1:]]


NORM_BENCH_LONG = REPO_ROOT / "recipes" / "sweeps" / "norm_bench_long.yaml"


def without(args: list, *flags: str) -> list:
    """``args`` without each of ``flags`` and its value."""
    dropped = {i + k for i, a in enumerate(args) if a in flags for k in (0, 1)}
    return [a for i, a in enumerate(args) if i not in dropped]


def test_the_long_runs_are_the_benchs_runs_of_their_schemes_ten_times_longer(tmp_path):
    """norm_bench_long.yaml (issue 50: does the early lead persist?): Pre-LN, NormFormer and the sandwich norm, each at
    the LR the bench trained its seeds at (docs/results/small/norm_bench/commands.sh), NormFormer and the sandwich norm
    at Pre-LN's too, then seed 2 at each one's best LR of that grid; each point the bench's run of that scheme, LR and
    seed with a schedule 10x longer (3,000 updates, warmup and validation every 300), a checkpoint every 300 updates
    (the last kept) and no gradient-norm records."""
    out = tmp_path / "norm_bench_long-small"
    result = run_cli(["normformer-sweep", NORM_BENCH_LONG, "--scale", "small", "--dry-run", "--out", out])
    printed = points_of(result.stdout.splitlines(), str(out))
    bench = points_of(COMMITTED.read_text().splitlines(), "work/recipes/norm_bench-small")
    seeds_lr = [m.groups() for p in bench if (m := re.fullmatch(r"grid/(\w+)-lr(.+)/seed2", p))]
    best = {scheme: lr for scheme, lr in seeds_lr if scheme in ("preln", "normformer", "sandwich")}
    grid = {f"grid/{s}-lr{lr}" for s in best for lr in {best[s], best["preln"]}}
    assert {p for p in printed if not p.endswith("/seed2")} == grid and len(grid) == 5
    seeds = {p[: -len("/seed2")] for p in printed if p.endswith("/seed2")}  # the dry run's best: the grid's middle LR
    assert seeds <= grid and {p.split("-lr")[0] for p in seeds} == {f"grid/{s}" for s in best} and len(printed) == 8
    longer = {"--warmup-updates": "300", "--total-num-update": "3000", "--max-update": "3000",
              "--validate-interval-updates": "300"}  # fmt: skip
    for run_dir, args in printed.items():
        flag = dict(zip(args, args[1:]))  # a flag given twice: its last value, as argparse reads it
        assert {k: flag[k] for k in longer} == longer
        assert (flag["--save-interval-updates"], flag["--keep-interval-updates"]) == ("300", "1")
        seed_1 = run_dir.removesuffix("/seed2")
        benchs = without(bench[seed_1], "--grad-norm-interval", "--grad-norm-file")
        benchs = [longer.get(benchs[i - 1], arg) if i else arg for i, arg in enumerate(benchs)]
        if run_dir != seed_1:  # the bench's seed 1 as its seed 2 runs: in its seed directory, with --seed 2
            at = len(benchs) - benchs[::-1].index("--seed")
            benchs = [a.replace(f"{seed_1}/", f"{run_dir}/") for a in [*benchs[:at], "2", *benchs[at + 1 :]]]
        assert without(args, "--save-interval-updates", "--keep-interval-updates") == without(
            benchs, "--save-interval-updates"), run_dir


LR_SENSITIVITY = REPO_ROOT / "recipes" / "sweeps" / "lr_sensitivity.yaml"
LADDER = ["1e-4", "2e-4", "5e-4", "1e-3", "2e-3", "5e-3", "1e-2", "2e-2", "5e-2", "1e-1", "2e-1", "5e-1"]
STUDY_SCHEMES = {  # issue 50's schemes, each one's switches on top of Pre-LN (docs/model.md)
    "preln": [], "qknorm": ["--qk-norm"], "zloss": ["--criterion", "cross_entropy_zloss", "--zloss", "1e-4"],
    "normformer": NORMFORMER, "sandwich": ["--sandwich-norm"], "rmsnorm": ["--norm-type", "rmsnorm"],
    "mixln": ["--post-ln-layers", "first:1"], "ln_scaling": ["--ln-scaling"], "olmo2": ["--reordered-norm"],
    "dyt": ["--norm-type", "dyt", "--dyt-alpha", "0.8,0.2,0.2"], "rezero": ["--rezero"],
}  # fmt: skip


def test_the_lr_sensitivity_spec_trains_every_scheme_at_every_lr_of_each_width(tmp_path):
    """Its `each_size`: one call, every width of the scale in OUT/SIZE (the size's variables in the model's flags,
    64 features a head), every scheme at every LR of the ladder with its switches, the diagnostics and every
    update's loss logged; each width's manifest; --set size=NAME --seeds 3 adds the seeds of one width only."""
    out = tmp_path / "lrs"
    printed = points_of(run_cli(["normformer-sweep", LR_SENSITIVITY, "--scale", "small", "--dry-run", "--out", out]).stdout.splitlines(), str(out))
    widths = {"w64": "64", "w128": "128", "w256": "256"}
    assert sorted(printed) == sorted(f"{size}/grid/{name}-lr{lr}" for size in widths for name in STUDY_SCHEMES for lr in LADDER)
    for run_dir, args in printed.items():
        size, name, lr = re.fullmatch(r"(\w+)/grid/(\w+)-lr(.+)", run_dir).groups()
        flag = dict(zip(args, args[1:]))
        width = int(widths[size])
        assert (flag["--decoder-embed-dim"], flag["--decoder-ffn-embed-dim"], flag["--decoder-attention-heads"]) == (
            str(width), str(4 * width), str(width // 64))
        assert flag["--decoder-layers"] == "4" and flag["--max-update"] == "300" and flag["--log-interval"] == "1"
        assert flag["--validate-interval-updates"] == "300"  # the point's, after _lm.yaml's 30: one validation, the last
        scheme = args[args.index("--share-decoder-input-output-embed") + 1 : args.index("--lr")]
        assert scheme == STUDY_SCHEMES[name] and flag["--lr"] == lr and flag["--seed"] == "1"
        assert flag["--diagnostics-file"] == f"{run_dir}/diagnostics.jsonl" and flag["--diagnostics-interval"] == "10"
    for size, width in widths.items():
        manifest = json.loads((out / size / "sweep.json").read_text())
        assert manifest["variables"]["width"] == width and manifest["lrs"]["rezero"] == LADDER
    assert not (out / "sweep.json").exists() and len(recorded_commands(out / "commands.sh")) == 3 * 11 * 12 + 1  # the corpus, once
    widest = run_cli(["normformer-sweep", LR_SENSITIVITY, "--scale", "small", "--dry-run", "--out", out, "--set",
                      "size=w256", "--seeds", "3"]).stdout.splitlines()  # fmt: skip
    seeds = [p for p in points_of(widest, str(out)) if "/seed" in p]
    assert all(p.startswith("w256/") for p in points_of(widest, str(out))) and len(seeds) == 2 * len(STUDY_SCHEMES)
    tiny = points_of(run_cli(["normformer-sweep", LR_SENSITIVITY, "--scale", "tiny", "--dry-run", "--out", out,
                              "--set", "lrs=1e-3 1e-2", "--schemes", "preln", "rezero"]).stdout.splitlines(), str(out))
    assert sorted(tiny) == sorted(f"{size}/grid/{name}-lr{lr}" for size in ("w32", "w64") for name in ("preln", "rezero")
                                  for lr in ("1e-3", "1e-2"))  # fmt: skip
    assert {tiny[f"{size}/grid/preln-lr1e-3"][tiny["w32/grid/preln-lr1e-3"].index("--decoder-attention-heads") + 1]
            for size in ("w32", "w64")} == {"1", "2"}  # fmt: skip


GRID_RECIPES = ("norm_bench", "norm_bench_long", "lr_sensitivity", "mlm_small", "table7_hparams", "table5_ablations", "fig2_time_to_target", "table3_lr_stability",
                "table8_wikitext103")
BASH_LOOP = re.compile(r"\bfor\s+(?:\(\(([^)]*)|(\w+)\s+in\s+([^;\n]*))")  # for ((...)) or for NAME in WORDS


def grid_loops(text: str) -> list:
    """The bash loops of ``text`` over seeds, LRs or schemes (by their variable or their list)."""
    loops = [" ".join(filter(None, m.groups())) for m in BASH_LOOP.finditer(text)]
    return [loop for loop in loops if "$(seq" in loop or re.search(r"seed|\blrs?\b|_lrs?\b|scheme|models?\b", loop, re.I)]


def sourced(script: Path) -> list:
    """The recipe helpers ``script`` sources, and theirs."""
    names = re.findall(r"^\s*source\s+.*?/(_\w+\.sh)", script.read_text(), re.M)
    return [h for name in names for h in (script.parent / name, *sourced(script.parent / name))]


def test_the_grid_recipes_and_their_helpers_loop_over_no_seed_lr_or_scheme():
    """Issue 49: the spec declares the grid, normformer-sweep runs it and normformer-analyze --seeds reads the seeds."""
    assert grid_loops('for seed in $(seq "$SEEDS"); do\nfor lr in $LRS; do\nfor k in $(seq 3); do') == [
        'seed $(seq "$SEEDS")', "lr $LRS", "k $(seq 3)"]  # fmt: skip
    for recipe in GRID_RECIPES:
        script = REPO_ROOT / "recipes" / f"{recipe}.sh"
        helpers = sourced(script)
        assert {h.name for h in helpers} >= {"_lm_common.sh", "_run_dir.sh"}, recipe
        for path in (script, *helpers):
            assert grid_loops(path.read_text()) == [], path.name


@pytest.mark.slow
def test_norm_bench_sh_passes_peak_lr_and_warmup_to_the_stability_tests(tmp_path):
    """PEAK_LR and WARMUP, the recipe's documented overrides of the stability test, reach every stability point
    (normformer-sweep --stability-peak-lr, --stability-warmup-updates); the training points keep the spec's."""
    import sys

    env = {**os.environ, "DRY_RUN": "1", "PY": sys.executable, "PEAK_LR": "3", "WARMUP": "50"}
    env.pop("DATA", None)
    result = subprocess.run(["bash", REPO_ROOT / "recipes" / "norm_bench.sh", "tiny", tmp_path / "out"], env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr
    stability = [recorded_command(line)[0] for line in result.stdout.splitlines() if " lr-stability " in line]
    assert len(stability) == 8
    for argv in stability:
        assert argv[argv.index("--peak-lr") + 1] == "3.0" and argv[argv.index("--warmup-updates") + 1] == "50"


def paper_settings_125m_on_8() -> dict:
    result = run_cli(["normformer-paper-settings", "--table", "6", "--size", "125M", "--model", "baseline",
                      "--world-size", "8", "--gpu-memory", "32", "--format", "json"])  # fmt: skip
    return json.loads(result.stdout)[0]


@pytest.mark.slow
def test_the_norm_bench_spec_on_your_corpus_at_125m_on_8_gpus(tmp_path):
    """--data of a corpus built from your text, --size 125M on 8 GPUs a point: a torchrun line per point with that
    data and the paper's 125M run (normformer-paper-settings), and the sbatch script that would be submitted."""
    text = tmp_path / "notes.txt"
    text.write_text("\n\n".join(first_paragraphs()), encoding="utf-8")
    run_cli(["normformer-build-corpus", "--text", text, "--out", tmp_path / "corpus", "--vocab-size", "300"])
    data = tmp_path / "corpus" / "data-bin"
    out = tmp_path / "sweep"
    result = run_cli(["normformer-sweep", NORM_BENCH, "--data", data, "--size", "125M", "--gpus-per-node", "8",
                      "--executor", "slurm", "--partition", "learn", "--dry-run", "--out", out])  # fmt: skip
    s = paper_settings_125m_on_8()
    lines = [line for line in result.stdout.splitlines() if "fairseq-train" in line and not line.startswith("#")]
    assert len(lines) == 52
    for line in lines:
        argv, _ = recorded_command(line)
        assert argv[1:3] == ["-m", "fairseq_normformer.runs.torchrun"] and "--nproc-per-node" in argv
        args = argv[argv.index(next(a for a in argv if a.endswith("fairseq-train"))) + 1 :]
        flag = {args[i]: args[i + 1] for i in range(1, len(args) - 1) if args[i].startswith("--")}
        assert args[0] == str(data) and flag["--arch"] == s["arch"] == "preln_lm_gpt3_small"
        assert (flag["--batch-size"], flag["--update-freq"], flag["--tokens-per-sample"]) == (
            str(s["batch_size"]), str(s["update_freq"]), str(s["tokens_per_sample"]))
        assert flag["--distributed-world-size"] == "8" and flag["--max-update"] == str(s["max_update"])
        assert all(a in args for a in s["memory_args"] + s["precision"])
        assert "--cpu" not in args
    assert "#SBATCH --partition=learn" in result.stdout and "#SBATCH --gpus-per-node=8" in result.stdout
    assert not (out / "slurm").exists()


def test_table3s_stability_tests_run_every_seed_at_the_papers_table_3_settings(tmp_path):
    """recipes/sweeps/table3_lr_stability.yaml at the paper scale: each model's test, every seed in OUT/NAME/seedK
    with --seed K, warmed up to Table 3's peak LR over its warmup (paper.py) with the paper's 125M batch on 8 GPUs."""
    from fairseq_normformer import paper

    out, spec = tmp_path / "t3", REPO_ROOT / "recipes" / "sweeps" / "table3_lr_stability.yaml"
    result = run_cli(["normformer-sweep", spec, "--scale", "paper", "--data", "/cluster/data-bin", "--remote-data",
                      "--world-size", "8", "--seeds", "2", "--dry-run", "--out", out])  # fmt: skip
    runs = {}
    for argv in (recorded_command(line)[0] for line in result.stdout.splitlines() if " lr-stability " in line):
        flag = {a: b for a, b in zip(argv, argv[1:]) if a.startswith("--")}
        runs[flag["--out-dir"]] = (flag["--peak-lr"], flag["--warmup-updates"], flag["--arch"], flag["--seed"],
                                   flag["--batch-size"], flag["--update-freq"], flag["--distributed-world-size"])
    table = {model: paper.settings("3", "125M", model, 8) for model in ("baseline", "normformer")}
    assert runs == {f"{out}/{model}" + ("/seed2" if k == 2 else ""): (
        paper.lr_text(s["lrs"][0]), str(s["warmup_updates"]), s["arch"], str(k), "16", "2", "8")
        for model, s in table.items() for k in (1, 2)}  # fmt: skip
    assert f"lr-table --seeds 2 --run Baseline={out}/baseline --run NormFormer={out}/normformer" in result.stdout


@pytest.mark.parametrize("argv, message", [
    (["--scale", "huge"], "--scale huge: the spec's scales are tiny, small"),
    (["--size", "125M"], "--size trains the paper's model: give --data"),
    (["--data", "nowhere"], "--data .*nowhere: not a fairseq-preprocess directory"),
    (["--spec", "missing.yaml"], "cannot read the spec missing.yaml"),
    (["--spec", "empty.yaml"], "empty.yaml: a spec needs `schemes`"),
    (["--spec", "unsized.yaml"], "the spec's `each_size` needs `sizes`, and scale tiny declares none"),
])  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(tmp_path, argv, message):
    """One line naming the problem, exit 2, nothing written."""
    import re

    from tests.conftest import console_script, in_process

    (tmp_path / "empty.yaml").write_text("name: empty\n")
    (tmp_path / "unsized.yaml").write_text(yaml.safe_dump({"each_size": True, "scales": {"tiny": {}}, "schemes": {"a": {"lrs": ["1"]}}}))
    spec = argv[1] if argv[0] == "--spec" else str(NORM_BENCH)
    argv = [] if argv[0] == "--spec" else argv
    result = in_process(console_script("normformer-sweep"), ["normformer-sweep", spec, "--dry-run",
                        "--out", str(tmp_path / "out"), *argv], tmp_path, {}, None)  # fmt: skip
    assert not (tmp_path / "out").exists()
    assert isinstance(result, subprocess.CompletedProcess) and result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and re.search(message, result.stderr), result.stderr


# --- a real grid through submitit's LocalExecutor --------------------------------------------------------------
def signal_the_job_of(run_dir: Path, update: int, done: threading.Event, timeout: float = 600):
    """Once run_dir's train.log has logged ``update``, SIGUSR2 (submitit's signal before a time limit) to the job
    process that runs its fairseq-train (the process's parent), as SLURM and the local executor send it."""
    log, deadline = run_dir / "train.log", time.time() + timeout
    while time.time() < deadline and not done.is_set():
        if log.exists() and max(logged_updates(log.read_text()), default=0) >= update:
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    args = cmdline.read_bytes().split(b"\0")
                    stat_line = (cmdline.parent / "stat").read_text()
                except OSError:
                    continue
                if str(run_dir / "checkpoints").encode() in args:
                    os.kill(int(stat_line.rsplit(")", 1)[1].split()[1]), signal.SIGUSR2)
                    return
        time.sleep(0.02)


@pytest.fixture(scope="module")
def local_sweep(tiny_lm_corpus, tmp_path_factory):
    """The 2 x 2 grid, two points at a time, NormFormer at 3e-3 signalled at update 4; then the same call again."""
    root = tmp_path_factory.mktemp("sweep")
    spec, out = tiny_spec(root / "tiny.yaml"), root / "out"
    interrupted = out / "grid" / "normformer-lr3e-3"
    finished = threading.Event()
    watcher = threading.Thread(target=signal_the_job_of, args=(interrupted, SIGNAL_AT, finished))
    watcher.start()
    argv = ["normformer-sweep", spec, "--data", tiny_lm_corpus.data_bin, "--out", out, "--jobs", "2"]
    env = forked_commands({**os.environ, **RUN_ENV})
    try:  # a process, its jobs and their fairseq-train forked (as submitit starts them: sys.executable, by path)
        first = subprocess.run([Path(env["PY"]).with_name(argv[0]), *map(str, argv[1:])], env=env, capture_output=True,
                               text=True, timeout=600, check=True)  # fmt: skip
    finally:
        finished.set()
        watcher.join()
    jobs_after_first = sorted((out / "submitit").glob("*_submitted.pkl"))
    again = run_cli(argv)
    return {"root": root, "spec": spec, "out": out, "interrupted": interrupted, "first": first, "again": again,
            "jobs_after_first": jobs_after_first}  # fmt: skip


@pytest.mark.slow
def test_a_signalled_point_is_requeued_and_resumes_equal_to_an_uninterrupted_run(local_sweep):
    out, interrupted = local_sweep["out"], local_sweep["interrupted"]
    assert all((out / "grid" / f"{n}-lr{lr}" / "done").exists() for n in ("preln", "normformer") for lr in ("1e-3", "3e-3"))
    log = (interrupted / "train.log").read_text()
    assert log.count("Loaded checkpoint") == 1, log[-3000:]
    first_part = log[: log.index("Loaded checkpoint")]
    saved_at = max(logged_updates(first_part))
    assert f"stopped by SIGUSR1 at update {saved_at}" in first_part and SIGNAL_AT <= saved_at < UPDATES
    job_logs = "".join(p.read_text() for p in (out / "submitit").glob("*_0_log.*"))
    assert "Requeued job" in job_logs and "Calling checkpoint method" in job_logs
    # the same point, uninterrupted, from the command commands.sh recorded for it
    line = next(line for line in (out / "commands.sh").read_text().splitlines() if str(interrupted / "checkpoints") in line)
    argv, _ = recorded_command(line)
    save_dir = local_sweep["root"] / "uninterrupted"
    argv[argv.index("--save-dir") + 1] = str(save_dir)
    reference = run_cli(["fairseq-train", *argv[1:]], env={"OMP_NUM_THREADS": "1"})
    expected = {u: s["loss"] for u, s in logged_updates(reference.stdout + reference.stderr).items()}
    resumed = {u: s["loss"] for u, s in logged_updates(log).items()}
    assert sorted(expected) == list(range(1, UPDATES + 1)) and resumed == expected


@pytest.mark.slow
def test_a_rerun_of_a_finished_sweep_submits_nothing(local_sweep):
    out = local_sweep["out"]
    assert "4 points done, 0 to run" in local_sweep["again"].stderr
    assert sorted((out / "submitit").glob("*_submitted.pkl")) == local_sweep["jobs_after_first"]
    assert len(local_sweep["jobs_after_first"]) == 4


@pytest.mark.slow
def test_an_archive_carries_the_finished_runs_to_another_directory_where_a_lost_run_is_trained_and_kept(
        local_sweep, tiny_lm_corpus, tmp_path):  # fmt: skip
    """--archive: the finished grid kept without its checkpoints, a run an archive under the corpus's id; a sweep into
    another directory restores it and trains nothing; a run lost there and from the archive is trained again, equal to
    the first, and kept as it ends."""
    import tarfile

    from fairseq_normformer.runs.archive import corpus_id

    out, archive, elsewhere = local_sweep["out"], tmp_path / "archive", tmp_path / "elsewhere"
    argv = ["normformer-sweep", local_sweep["spec"], "--data", tiny_lm_corpus.data_bin, "--archive", archive]
    assert "4 points done, 0 to run" in run_cli([*argv, "--out", out]).stderr
    kept = archive / corpus_id(tiny_lm_corpus.data_bin)
    runs = [f"grid/{name}-lr{lr}" for name in ("normformer", "preln") for lr in ("1e-3", "3e-3")]
    assert sorted(str(p.relative_to(kept)) for p in kept.rglob("*.tar.xz")) == [f"{run}.tar.xz" for run in runs]
    for run in runs:
        files = [p for p in (out / run).rglob("*") if p.is_file() and "checkpoints" not in p.relative_to(out).parts]
        with tarfile.open(kept / f"{run}.tar.xz") as tar:
            assert sorted(tar.getnames()) == sorted(str(p.relative_to(out / run)) for p in files)
    result = run_cli([*argv, "--out", elsewhere])
    assert "4 runs restored" in result.stderr and "4 points done, 0 to run" in result.stderr
    assert not list((elsewhere / "submitit").glob("*_submitted.pkl"))
    assert all((elsewhere / run / "train.log").read_bytes() == (out / run / "train.log").read_bytes() for run in runs)
    lost = "grid/preln-lr1e-3"
    for path in ((elsewhere / lost / name) for name in ("train.log", "diagnostics.jsonl", "done")):
        path.unlink()
    (kept / f"{lost}.tar.xz").unlink()
    result = run_cli([*argv, "--out", elsewhere], env={"OMP_NUM_THREADS": "1"})
    assert "0 runs restored" in result.stderr and "4 points done, 0 to run" in run_cli([*argv, "--out", elsewhere]).stderr
    assert len(list((elsewhere / "submitit").glob("*_submitted.pkl"))) == 1
    with tarfile.open(kept / f"{lost}.tar.xz") as tar:
        retrained = tar.extractfile("train.log").read().decode()
    losses = {u: s["loss"] for u, s in logged_updates((out / lost / "train.log").read_text()).items()}
    assert sorted(losses) == list(range(1, UPDATES + 1)) and {u: s["loss"] for u, s in logged_updates(retrained).items()} == losses


@pytest.mark.slow
def test_analyze_sweep_writes_the_tables_ppl_table_and_lr_grid_write(local_sweep):
    """normformer-analyze sweep against the subcommands the recipe ran on the same logs (the best LR by lr-grid)."""
    out, root = local_sweep["out"], local_sweep["root"]
    run_cli(["normformer-analyze", "sweep", out])
    best = {}
    for name in ("preln", "normformer"):
        runs = [a for lr in ("1e-3", "3e-3") for a in ("--run", f"{lr}={out}/grid/{name}-lr{lr}/train.log")]
        best[name] = run_cli(["normformer-analyze", "lr-grid", *runs, "--out", root / f"{name}.md"]).stdout.split()[0]
        assert (out / "grid" / f"{name}.md").read_text().endswith((root / f"{name}.md").read_text())
    runs = ["--run", f"Pre-LN (lr {best['preln']})={out}/grid/preln-lr{best['preln']}/train.log",
            "--run", f"NormFormer (lr {best['normformer']})={out}/grid/normformer-lr{best['normformer']}/train.log"]
    run_cli(["normformer-analyze", "ppl-table", *runs, "--out", root / "schemes.md"])
    table = (out / "schemes.md").read_text()
    assert table.split("\n\n", 1)[1] == (root / "schemes.md").read_text()
    assert (out / "time_to_target" / "normformer" / "fig2_time_to_target.md").exists()


@pytest.mark.slow
def test_analyze_lr_sensitivity_of_the_trained_grid_is_wortsmans_formula_on_its_logs(local_sweep, tmp_path):
    """normformer-analyze lr-sensitivity on the finished grid (one width: a sweep without `each_size`): each scheme's
    loss at initialisation is update 1's training loss, the same at both LRs (one seed), its sensitivity the formula
    on the last validations' losses, the diagnostics those of its largest stable LR's last record."""
    from fairseq_normformer.analysis.diagnostics import read_diagnostics
    from fairseq_normformer.analysis.lr_sensitivity import lr_sensitivity
    from fairseq_normformer.analysis.training_log import read_training_log

    out = local_sweep["out"]
    run_cli(["normformer-analyze", "lr-sensitivity", out, "--out-dir", tmp_path])
    (width,) = json.loads((tmp_path / "lr_sensitivity.json").read_text())["widths"].values()
    for name in ("preln", "normformer"):
        logs = {lr: read_training_log(out / "grid" / f"{name}-lr{lr}" / "train.log") for lr in ("1e-3", "3e-3")}
        (initial,) = {next(r["loss"] for r in log.train if r["num_updates"] == 1) for log in logs.values()}
        finals = {lr: log.final_metric("loss") for lr, log in logs.items()}
        s = width[name]
        assert s["initial_loss"] == initial and max(finals.values()) < initial and s["largest_stable_lr"] == "3e-3"
        assert s["lr_sensitivity"] == pytest.approx(sum(finals.values()) / 2 - min(finals.values()))
        assert s["lr_sensitivity"] == pytest.approx(lr_sensitivity(finals, initial))
        last = read_diagnostics(out / "grid" / f"{name}-lr3e-3" / "diagnostics.jsonl")[-1]
        assert (s["diagnostics_update"], s["abs_log_z"], s["attn_logit"]) == (UPDATES, last["abs_log_z"], max(last["attn_logit"].values()))
        assert s["last_layer_rms"] == last["layer_rms"]["layers.1"]


@pytest.mark.slow
def test_a_finished_sweep_writes_the_specs_reports(local_sweep, tiny_lm_corpus):
    """The spec's `reports` (the recipes' tables) run once every point is done, into --report-dir: ``$runs`` is
    every point's train.log under its `run_label`, and the command is recorded in that directory's commands.sh."""
    out, reports = local_sweep["out"], local_sweep["root"] / "reports"
    spec = tiny_spec(local_sweep["root"] / "reports.yaml", run_label="{label}, lr {lr}",
                     reports=[["ppl-table", "$runs", "--title", "{scale}", "--out", "{report_dir}/table.md"]])  # fmt: skip
    result = run_cli(["normformer-sweep", spec, "--data", tiny_lm_corpus.data_bin, "--out", out, "--report-dir", reports])
    assert "4 points done, 0 to run" in result.stderr
    rows = [line.split("|")[1].strip() for line in (reports / "table.md").read_text().splitlines() if line.startswith("| ")]
    assert rows[1:] == [f"{label}, lr {lr}" for label in ("NormFormer", "Pre-LN") for lr in ("1e-3", "3e-3")]  # the spec's order
    (argv,) = recorded_commands(reports / "commands.sh")
    logs = [value.split("=", 1)[1] for flag, value in zip(argv, argv[1:]) if flag == "--run"]
    assert argv[1:2] == ["ppl-table"] and logs == [f"{out}/grid/{name}-lr{lr}/train.log" for name in ("normformer", "preln")
                                                   for lr in ("1e-3", "3e-3")]  # fmt: skip


@pytest.mark.slow
def test_a_finished_run_is_evaluated_once_as_its_own_point(local_sweep, tiny_lm_corpus, tmp_path):
    """The spec's `evaluate` (Table 8's fairseq-eval-lm): a finished run of the grid (a copy) evaluated as a job of
    its own, its output in RUN_DIR/eval_SPLIT.log, its marker eval_SPLIT.done beside the run's; a rerun runs nothing.
    A diverged run is not evaluated; a dry run lists the evaluation of each run it would train."""
    import shutil

    from fairseq_normformer.analysis.training_log import read_eval_lm, read_training_log

    run_dir = tmp_path / "out" / "grid" / "preln-lr1e-3"
    shutil.copytree(local_sweep["out"] / "grid" / "preln-lr1e-3", run_dir)
    evaluate = {"command": "fairseq-eval-lm", "splits": ["valid"],
                "args": ["--path", "{run_dir}/checkpoints/checkpoint_best.pt", "--gen-subset", "{split}"]}  # fmt: skip
    spec = tiny_spec(tmp_path / "eval.yaml", evaluate=evaluate, schemes={"preln": {"label": "Pre-LN", "lrs": ["1e-3"]}},
                     scales={"tiny": {"model": TINY_MODEL, "eval": ["--cpu", "--num-workers", "0", "--tokens-per-sample", "32"]}})
    argv = ["normformer-sweep", spec, "--data", tiny_lm_corpus.data_bin, "--out", tmp_path / "out"]
    (run_dir / "done").rename(run_dir / "diverged")
    assert "1 points done, 0 to run" in run_cli(argv).stderr
    (run_dir / "diverged").unlink()
    planned = [recorded_command(line)[1] for line in run_cli([*argv, "--dry-run"]).stdout.splitlines()]
    assert planned == [str(run_dir / "train.log"), str(run_dir / "eval_valid.log")]
    (run_dir / "done").touch()
    run_cli(argv, env={"OMP_NUM_THREADS": "1"})
    assert "2 points done, 0 to run" in run_cli(argv).stderr and (run_dir / "eval_valid.done").exists()
    final_valid = read_training_log(run_dir / "train.log").final_metric("ppl")  # the same checkpoint's, on valid
    assert read_eval_lm(run_dir / "eval_valid.log")["ppl"] == pytest.approx(final_valid, rel=0.01)
    assert len(list((tmp_path / "out" / "submitit").glob("*_submitted.pkl"))) == 1
    dry, line = [line for line in (tmp_path / "out" / "commands.sh").read_text().splitlines() if "fairseq-eval-lm" in line]
    assert line == dry and "--gen-subset valid" in line and recorded_command(line)[1] == str(run_dir / "eval_valid.log")


@pytest.mark.slow
def test_a_spec_with_a_ladder_widens_the_grid_the_runs_decided(local_sweep, tiny_lm_corpus):
    """The same finished grid under a spec with a ladder: the next LR beyond the edge where lr-grid puts each
    scheme's best is what runs next (a dry run prints it)."""
    out, root = local_sweep["out"], local_sweep["root"]
    spec = tiny_spec(root / "ladder.yaml", ladder=["3e-4", "1e-3", "3e-3", "1e-2"])
    result = run_cli(["normformer-sweep", spec, "--data", tiny_lm_corpus.data_bin, "--out", out, "--dry-run"])
    beyond = {"lowest": "3e-4", "highest": "1e-2"}
    expected = []
    for name in ("preln", "normformer"):
        runs = [a for lr in ("1e-3", "3e-3") for a in ("--run", f"{lr}={out}/grid/{name}-lr{lr}/train.log")]
        position = run_cli(["normformer-analyze", "lr-grid", *runs, "--out", root / f"{name}-p.md"]).stdout.split()[1]
        expected.append(f"grid/{name}-lr{beyond[position]}")
    assert sorted(points_of(result.stdout.splitlines(), str(out))) == sorted(expected)


@pytest.mark.slow
def test_analyze_sweep_names_a_diverged_scheme_and_does_not_average_it(local_sweep, tiny_lm_corpus, tmp_path):
    """The finished grid with NormFormer's runs marked diverged (as TrainJob marks a run fairseq stopped on a
    numerical failure): schemes.md names NormFormer below the table and has no row of it; Pre-LN's row is the
    one ppl-table writes alone."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(local_sweep["out"], out, ignore=shutil.ignore_patterns("time_to_target", "*.md", "*.png"))  # runs only
    for lr in ("1e-3", "3e-3"):
        (out / "grid" / f"normformer-lr{lr}" / "done").rename(out / "grid" / f"normformer-lr{lr}" / "diverged")
    run_cli(["normformer-sweep", local_sweep["spec"], "--data", tiny_lm_corpus.data_bin, "--out", out, "--dry-run"])
    run_cli(["normformer-analyze", "sweep", out])
    table = (out / "schemes.md").read_text()
    assert "Diverged, not averaged:\n- NormFormer: every LR of its grid (1e-3, 3e-3) diverged" in table
    assert "NormFormer (lr" not in table and not (out / "time_to_target" / "normformer").exists()
    best = json.loads((out / "sweep.json").read_text())["best"]
    assert best["normformer"] is None
    log = out / "grid" / f"preln-lr{best['preln']}" / "train.log"
    run_cli(["normformer-analyze", "ppl-table", "--run", f"Pre-LN (lr {best['preln']})={log}", "--out", tmp_path / "alone.md"])
    assert (tmp_path / "alone.md").read_text() in table


@pytest.mark.slow
def test_analyze_sweep_reads_the_runs_where_the_specs_run_dir_put_them(local_sweep, tiny_lm_corpus, tmp_path):
    """A spec's run_dir (mlm_small's and table7_hparams' "{name}-lr{lr}", no grid/) is where the tables are read from:
    the same tables as from the runs in grid/."""
    import shutil

    tables = {}
    for layout in ("grid", "run_dir"):
        out = tmp_path / layout
        shutil.copytree(local_sweep["out"], out, ignore=shutil.ignore_patterns("time_to_target", "*.md", "*.png"))
        run_cli(["normformer-sweep", local_sweep["spec"], "--data", tiny_lm_corpus.data_bin, "--out", out, "--dry-run"])
        if layout == "run_dir":
            for run in (out / "grid").iterdir():
                run.rename(out / run.name)
            (out / "grid").rmdir()
            manifest = json.loads((out / "sweep.json").read_text())
            manifest["spec"]["run_dir"] = "{name}-lr{lr}"
            (out / "sweep.json").write_text(json.dumps(manifest))
        run_cli(["normformer-analyze", "sweep", out])
        tables[layout] = (out / "schemes.md").read_text().replace(str(out), "OUT").replace("OUT/grid/", "OUT/")
    assert tables["run_dir"] == tables["grid"] and "NormFormer (lr" in tables["grid"]


def updates_logged(log: Path) -> int:
    return max(logged_updates(log.read_text()), default=0) if log.exists() else 0


def signal_this_process_at(log: Path, update: int, timeout: float = 300):
    """SIGUSR1 to this process once ``log`` has logged ``update`` (as TrainJob.checkpoint signals its command)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if updates_logged(log) >= update:
            os.kill(os.getpid(), signal.SIGUSR1)
            return
        time.sleep(0.05)


def processes_with(arg: str) -> list:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if arg.encode() in cmdline.read_bytes().split(b"\0"):
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_a_stability_point_stopped_mid_run_stops_its_fairseq_train_and_is_run_again(tiny_lm_corpus, tmp_path):
    """A stability point's job is requeued mid-run: TrainJob.checkpoint sends SIGUSR1 to normformer-analyze
    lr-stability (here run in this process, signalled by a thread), which stops its fairseq-train and says so;
    the requeued command on that directory, which holds the stopped train.log, is not refused (a dry run prints
    it): the attempt is kept in stopped-1/ and the test starts over. A finished directory is refused."""
    from fairseq_normformer.runs.lr_stability import keep_stopped_attempt
    from tests.conftest import console_script, in_process

    out = tmp_path / "stability"
    argv = ["normformer-analyze", "lr-stability", str(tiny_lm_corpus.data_bin), "--peak-lr", "1e-3", "--warmup-updates",
            "100000", "--out-dir", str(out), "--", *TINY_MODEL, "--tokens-per-sample", "32", "--batch-size", "4",
            "--optimizer", "adam", "--cpu", "--num-workers", "0", "--disable-validation", "--no-save"]  # fmt: skip
    main = console_script("normformer-analyze")
    watcher = threading.Thread(target=signal_this_process_at, args=(out / "train.log", 2))
    watcher.start()
    stopped = in_process(main, argv, REPO_ROOT, {"OMP_NUM_THREADS": "1"}, None)
    watcher.join()
    assert stopped.returncode == 1 and "stopped by SIGUSR1 before the test finished" in stopped.stderr, stopped.stderr
    assert processes_with(str(out / "checkpoints")) == [] and not (out / "done").exists()
    attempt = (out / "train.log").read_text()
    assert 2 <= max(logged_updates(attempt)) < 100000
    again = in_process(main, argv, REPO_ROOT, {"DRY_RUN": "1"}, None)
    assert again.returncode == 0 and str(out / "checkpoints") in again.stdout, again.stderr
    keep_stopped_attempt(out)
    assert (out / "stopped-1" / "train.log").read_text() == attempt and not (out / "train.log").exists()
    (out / "done").touch()
    finished = in_process(main, argv, REPO_ROOT, {"DRY_RUN": "1"}, None)
    assert finished.returncode == 1 and "already holds a finished run (done)" in finished.stderr


# --- SLURM, through fake sbatch and sacct ----------------------------------------------------------------------
FAKE_SBATCH = """#!/bin/sh
cp "$1" "$FAKE_SLURM/script$(ls "$FAKE_SLURM" | grep -c script).sh"
echo "Submitted batch job 4242"
"""
FAKE_SACCT = """#!/bin/sh
echo "JobID|State|NodeList"
for task in 0 1 2 3; do echo "4242_$task|PENDING|None assigned"; done
"""
FAKE_SRUN = """#!/bin/sh
echo "srun runs inside the job, never at submission" >&2
exit 1
"""


def fake_slurm(directory: Path) -> dict:
    """sbatch that keeps each script it is given and answers job 4242; sacct that reports its tasks pending; srun,
    which submitit looks for on PATH before it submits."""
    directory.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("sacct", FAKE_SACCT), ("srun", FAKE_SRUN)):
        (directory / name).write_text(text)
        (directory / name).chmod(stat.S_IRWXU)
    return {"PATH": f"{directory}:{os.environ['PATH']}", "FAKE_SLURM": str(directory)}


def test_slurm_submits_one_array_with_the_signal_and_requeue_and_a_rerun_submits_nothing(tmp_path, tiny_lm_corpus):
    import cloudpickle

    env = fake_slurm(tmp_path / "bin")
    out = tmp_path / "out"
    argv = ["normformer-sweep", tiny_spec(tmp_path / "tiny.yaml"), "--data", tiny_lm_corpus.data_bin, "--out", out,
            "--executor", "slurm", "--partition", "learn", "--time", "600", "--array-parallelism", "2"]  # fmt: skip
    first = run_cli(argv, env=env)
    assert "submitted 4 points as array job 4242" in first.stderr
    script = (tmp_path / "bin" / "script0.sh").read_text()
    for line in ("#SBATCH --array=0-3%2", "#SBATCH --signal=USR2@120", "#SBATCH --requeue", "#SBATCH --partition=learn",
                 "#SBATCH --time=600", "#SBATCH --ntasks-per-node=1", "#SBATCH --open-mode=append"):
        assert line in script.splitlines(), (line, script)
    listed = [line.split(": ", 1)[1] for line in script.splitlines() if line.startswith("# array task ")]
    assert len(listed) == 4 and all("fairseq-train" in line for line in listed)
    # each array task's pickle runs the point its line lists, and that point's run directory knows its job
    for task, line in enumerate(listed):
        delayed = cloudpickle.loads((out / "slurm" / f"4242_{task}_submitted.pkl").read_bytes())
        point = delayed.args[0]
        assert recorded_command(line) == (list(point.command), str(point.log))
        assert (point.run_dir / "slurm_job").read_text() == f"4242_{task}\n"
        assert hasattr(delayed.function, "checkpoint")
    again = run_cli(argv, env=env)
    assert "nothing to submit" in again.stderr and not (tmp_path / "bin" / "script1.sh").exists()
