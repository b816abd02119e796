"""Seeds: the statistics against scipy, normformer-analyze's tables over seeds on synthetic fairseq logs in
the run-directory layout, and the recipes' SEEDS= (DRY_RUN=1)."""
import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from fairseq_normformer.analysis.plots import mean_over_seeds
from fairseq_normformer.analysis.seeds import mean_std, paired_differences, t_interval
from fairseq_normformer.cli.analyze import build_parser, parse
from fairseq_normformer.cli.analyze import main as analyze
from fairseq_normformer.cli.zero_shot import main as zero_shot
from tests.analysis.test_training_log import write_log
from tests.conftest import REPO_ROOT, recorded_commands

BASELINE = [30.2, 31.0, 29.5]
NORMFORMER = [28.1, 29.2, 27.9]  # clearly lower, seed by seed
NOISE = [30.0, 31.3, 29.6]  # up and down by seed


def test_mean_std_and_paired_interval_match_scipy():
    mean, std = mean_std(BASELINE)
    assert (mean, std) == pytest.approx((np.mean(BASELINE), np.std(BASELINE, ddof=1)))
    for candidate in (NORMFORMER, NOISE):
        reference = stats.ttest_rel(candidate, BASELINE)
        ci = reference.confidence_interval(0.95)
        interval = t_interval(paired_differences(candidate, BASELINE))
        assert (interval.low, interval.high) == pytest.approx((ci.low, ci.high))
        # the interval holds 0 exactly when the paired t-test does not reject at 5%
        assert interval.contains(0.0) == (reference.pvalue >= 0.05)
    assert t_interval(paired_differences(NOISE, BASELINE)).contains(0.0)
    assert not t_interval(paired_differences(NORMFORMER, BASELINE)).contains(0.0)
    assert t_interval([0.7]) is None and mean_std([0.7]) == (0.7, None)
    with pytest.raises(ValueError, match="paired by seed"):
        paired_differences([1.0, 2.0], BASELINE)


def seed_path(run_dir, seed, name="train.log"):
    """The run-directory convention: seed 1 in RUN_DIR, seed K in RUN_DIR/seedK."""
    path = run_dir / (name if seed == 1 else f"seed{seed}/{name}")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def fake_runs(root, final_ppl, params=1000, hit=None) -> list:
    """One fairseq-train log per seed, validation at updates 2, 4 and 6; the last is ``final_ppl[k]``; with
    ``hit``, seed k's perplexity at update ``hit[k]`` and after is already that final value."""
    logs = []
    for k, ppl in enumerate(final_ppl):
        updates = {2: ppl + 20, 4: ppl + 10, 6: ppl}
        for u in updates:
            updates[u] = ppl if hit and u >= hit[k] else updates[u]
        logs.append(write_log(seed_path(root, k + 1), "json", updates, seconds_per_update=10, params=params))
    return logs


def table_rows(path) -> dict:
    lines = [line for line in path.read_text().splitlines() if line.startswith("| ")]
    return {cells[0]: cells for cells in ([c.strip() for c in line.split("|")[1:-1]] for line in lines[1:])}


def interval(candidate, baseline) -> tuple:
    """(mean, low, high) of the paired differences, by scipy."""
    ci = stats.ttest_rel(candidate, baseline).confidence_interval(0.95)
    return np.mean(candidate) - np.mean(baseline), ci.low, ci.high


def decimals(*numbers) -> int:
    """A table column's decimals: 4 significant digits of its largest number."""
    return max(0, 3 - int(np.floor(np.log10(max(abs(x) for x in numbers)))))


def interval_text(candidate, baseline, places=None):
    """As a table cell (``places`` decimals) or alone (4 significant digits)."""
    number = (lambda x: f"{x:.4g}") if places is None else (lambda x: f"{x:.{places}f}")  # noqa: E731
    return "{} [{}, {}]".format(*map(number, interval(candidate, baseline)))


def mean_std_text(values, places):
    return f"{np.mean(values):.{places}f} ± {np.std(values, ddof=1):.{places}f}"


def test_ppl_table_over_three_seeds(tmp_path):
    runs = []
    for label, ppl, params in (("Baseline", BASELINE, 1000), ("NormFormer", NORMFORMER, 1328), ("Noise", NOISE, 1000)):
        runs += [f"--run={label}={log}" for log in fake_runs(tmp_path / label, ppl, params)]
    analyze(["ppl-table", *runs, "--out", str(tmp_path / "t.md"), "--plot", str(tmp_path / "curves.png")])
    rows = table_rows(tmp_path / "t.md")
    assert list(rows) == ["Baseline", "NormFormer", "Noise"]
    header = (tmp_path / "t.md").read_text().splitlines()[0]  # "±" is a standard deviation and says so
    assert "| Valid PPL (mean ± sd) | Best valid PPL (mean ± sd) | Δ valid PPL vs first row (95% CI) |" in header
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert rows["NormFormer"][1:4] == ["1328", "3", "6"]  # params, seeds, updates
    assert rows["Baseline"][4] == mean_std_text(BASELINE, 2)  # the column's largest: 30.3, 4 digits
    assert rows["Baseline"][5] == rows["Baseline"][4]  # the final validation is the best here
    assert rows["Baseline"][6] == "—"
    places = decimals(*interval(NORMFORMER, BASELINE), *interval(NOISE, BASELINE))
    assert rows["NormFormer"][6] == interval_text(NORMFORMER, BASELINE, places)
    assert rows["Noise"][6] == interval_text(NOISE, BASELINE, places) + " within seed noise"


def test_seeds_option_reads_each_runs_seed_directories(tmp_path):
    """--seeds N: a --run path is seed 1's, seed K's the same file in RUN_DIR/seedK (a run directory: RUN_DIR/seedK);
    the table equals the one of every seed's path given under its label."""
    per_seed = []
    for label, ppl in (("Baseline", BASELINE), ("NormFormer", NORMFORMER)):
        per_seed += [f"--run={label}={log}" for log in fake_runs(tmp_path / label, ppl)]
    analyze(["ppl-table", *per_seed, "--out", str(tmp_path / "each.md")])
    analyze(["ppl-table", "--seeds", "3", "--run", f"Baseline={tmp_path}/Baseline/train.log",
             "--run", f"NormFormer={tmp_path}/NormFormer/train.log", "--out", str(tmp_path / "seeds.md")])  # fmt: skip
    assert (tmp_path / "seeds.md").read_text() == (tmp_path / "each.md").read_text()
    assert table_rows(tmp_path / "seeds.md")["NormFormer"][2] == "3"
    args = parse(build_parser(), ["lr-table", "--run", "A=out/a", "--seeds", "2", "--out", "t.md"])
    assert args.run == [("A", "out/a"), ("A", "out/a/seed2")]
    args = parse(build_parser(), ["time-to-target", "--seeds", "2", "--baseline", "b/train.log", "--candidate",
                                  "n/train.log", "--out-dir", "f"])  # fmt: skip
    assert (args.baseline, args.candidate) == (["b/train.log", "b/seed2/train.log"], ["n/train.log", "n/seed2/train.log"])
    with pytest.raises(SystemExit):
        parse(build_parser(), ["ppl-table", "--seeds", "0", "--run", "A=a.log", "--out", "t.md"])


def test_ppl_table_compares_every_row_to_a_chosen_one_too(tmp_path):
    """Table 5's ablations against NormFormer: --compare-to adds each row's paired interval to that row."""
    runs = []
    for label, ppl in (("Baseline", BASELINE), ("NormFormer", NORMFORMER), ("Noise", NOISE)):
        runs += [f"--run={label}={log}" for log in fake_runs(tmp_path / label, ppl)]
    analyze(["ppl-table", *runs, "--compare-to", "NormFormer", "--out", str(tmp_path / "t.md")])
    header = (tmp_path / "t.md").read_text().splitlines()[0]
    assert header.endswith("| Δ valid PPL vs first row (95% CI) | Δ valid PPL vs NormFormer (95% CI) |")
    rows = table_rows(tmp_path / "t.md")
    places = [decimals(*interval(NORMFORMER, BASELINE), *interval(NOISE, BASELINE)),
              decimals(*interval(BASELINE, NORMFORMER), *interval(NOISE, NORMFORMER))]  # fmt: skip
    assert rows["NormFormer"][6:] == [interval_text(NORMFORMER, BASELINE, places[0]), "—"]
    assert rows["Baseline"][7] == interval_text(BASELINE, NORMFORMER, places[1])
    assert rows["Noise"][7] == interval_text(NOISE, NORMFORMER, places[1])
    with pytest.raises(SystemExit, match="--compare-to 'NF' is not the label of a --run"):
        analyze(["ppl-table", *runs, "--compare-to", "NF", "--out", str(tmp_path / "u.md")])


def test_one_seed_has_no_interval_and_unpaired_seeds_are_refused(tmp_path):
    (base,), (nf,) = fake_runs(tmp_path / "b", [30.0]), fake_runs(tmp_path / "n", [28.5])
    analyze(["ppl-table", f"--run=Baseline={base}", f"--run=NormFormer={nf}", "--out", str(tmp_path / "t.md")])
    rows = table_rows(tmp_path / "t.md")
    assert rows["Baseline"][2:5] == ["1", "6", "30.00"] and rows["NormFormer"][6] == "-1.500 (1 seed: no interval)"
    assert "| Valid PPL | Best valid PPL |" in (tmp_path / "t.md").read_text()  # one seed: no sd to name
    more = fake_runs(tmp_path / "m", [28.0, 29.0])
    unpaired = ["ppl-table", f"--run=Baseline={base}", *[f"--run=NormFormer={p}" for p in more], "--out", str(tmp_path / "u.md")]
    with pytest.raises(SystemExit, match="rows 'Baseline' and 'NormFormer' are paired by seed, but one has 2 seeds and the other 1"):
        analyze(unpaired)


def test_a_diverged_seed_is_refused_by_name_not_averaged(tmp_path):
    base, nf = fake_runs(tmp_path / "b", BASELINE), fake_runs(tmp_path / "n", NORMFORMER)
    with open(nf[1], "a") as f:  # seed 2 validated, then fairseq stopped on a numerical failure
        f.write("FloatingPointError: gradients are Nan/Inf\n")
    runs = [f"--run=Baseline={p}" for p in base] + [f"--run=NormFormer={p}" for p in nf]
    for command in (["ppl-table"], ["metric-table", "--metric", "ppl"]):
        with pytest.raises(SystemExit, match=f"{nf[1]} diverged .FloatingPointError: gradients are Nan/Inf.: it has no final validation"):
            analyze([*command, *runs, "--out", str(tmp_path / "t.md")])
    assert not (tmp_path / "t.md").exists()


def test_time_to_target_fraction_over_seeds(tmp_path):
    hit = [4, 4, 6]  # NormFormer reaches its baseline's final perplexity at these updates (of 6)
    baselines = fake_runs(tmp_path / "b", BASELINE)
    candidates = fake_runs(tmp_path / "n", BASELINE, hit=hit)
    pairs = [arg for b, c in zip(baselines, candidates) for arg in ("--baseline", str(b), "--candidate", str(c))]
    analyze(["time-to-target", *pairs, "--out-dir", str(tmp_path / "fig")])
    fractions = [u / 6 for u in hit]
    ci = stats.ttest_1samp(fractions, popmean=1.0).confidence_interval(0.95)
    record = json.loads((tmp_path / "fig" / "fig2_time_to_target.json").read_text())
    assert [s["hit_update"] for s in record["seeds"]] == hit
    summary = record["update_fraction"]
    assert summary["per_seed"] == pytest.approx(fractions)
    assert (summary["low"], summary["high"]) == pytest.approx((ci.low, ci.high))
    text = (tmp_path / "fig" / "fig2_time_to_target.md").read_text()
    assert (f"Fraction of updates over 3 seeds: {np.mean(fractions):.4g} ± {np.std(fractions, ddof=1):.4g} (mean ± std), "
            f"95% CI {np.mean(fractions):.4g} [{ci.low:.4g}, {ci.high:.4g}] within seed noise; the validations bound "
            f"each crossing, so the mean fraction lies in ({np.mean([u - 2 for u in hit]) / 6:.4g}, "
            f"{np.mean(fractions):.4g}]") in text  # holds 1; validations every 2 updates
    assert [s["previous_update"] for s in record["seeds"]] == [u - 2 for u in hit]
    assert (tmp_path / "fig" / "fig2_time_to_target.png").read_bytes()[:4] == b"\x89PNG"

    never = fake_runs(tmp_path / "never", [p + 1 for p in BASELINE])  # never down to the baseline's final ppl
    analyze(["time-to-target", "--baseline", str(baselines[0]), "--candidate", str(never[0]),
             "--baseline", str(baselines[1]), "--candidate", str(candidates[1]), "--out-dir", str(tmp_path / "f2")])  # fmt: skip
    text = (tmp_path / "f2" / "fig2_time_to_target.md").read_text()
    assert "NormFormer does not reach Baseline's final perplexity with seed 1: no fraction over seeds" in text


def test_eval_table_over_seeds(tmp_path):
    ppl = {"Baseline": ([40.0, 41.5], [42.0, 43.0]), "NormFormer": ([38.0, 38.9], [40.1, 41.2])}
    runs = []
    for label, (valid, test) in ppl.items():
        fake_runs(tmp_path / label, valid)
        for seed, splits in enumerate(zip(valid, test), 1):
            for split, value in zip(("valid", "test"), splits):
                seed_path(tmp_path / label, seed, f"eval_{split}.log").write_text(
                    f"INFO:fairseq_cli.eval_lm:Loss (base 2): 5.3, Perplexity: {value}\n")  # fmt: skip
            runs.append(f"--run={label}={seed_path(tmp_path / label, seed, '')}")
    analyze(["eval-table", *runs, "--out", str(tmp_path / "t8.md")])
    rows = table_rows(tmp_path / "t8.md")
    assert rows["NormFormer"][2:4] == ["2", mean_std_text(ppl["NormFormer"][0], 2)]  # the column's largest: 40.75
    valid_delta, test_delta = (interval_text(ppl["NormFormer"][i], ppl["Baseline"][i],
                                             decimals(*interval(ppl["NormFormer"][i], ppl["Baseline"][i])))
                               for i in (0, 1))  # fmt: skip
    assert rows["NormFormer"][5:] == [valid_delta + " within seed noise", test_delta]  # -2.0, -2.6 vs -1.9, -1.8


def dry_run(recipe, out, *args, **env):
    """The commands DRY_RUN=1 recipes/RECIPE.sh ARGS... (default: tiny OUT) writes to OUT/commands.sh."""
    env = {**os.environ, "DRY_RUN": "1", "PY": sys.executable, "PAIR": str(out / "pair"), **env}
    script = REPO_ROOT / "recipes" / f"{recipe}.sh"
    result = subprocess.run(["bash", script, *(args or ("tiny", out))], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return recorded_commands(out / "commands.sh")


def analyzed(argv, command) -> list:
    """The inputs (LABEL=PATH, or PATH) a recorded normformer-analyze ``command`` reads, one per seed, --seeds
    expanded as normformer-analyze does."""
    args = parse(build_parser(), argv[argv.index(command) :])
    return [f"{run[0]}={run[1]}" if isinstance(run, tuple) else run
            for name in ("baseline", "run", "candidate") for run in getattr(args, name, None) or []]  # fmt: skip


def seed_of(run_dir) -> int:
    match = re.search(r"/seed(\d+)$", run_dir)
    return int(match.group(1)) if match else 1


def last_value(argv, flag):
    """The value of the last ``flag`` (argparse's choice when a flag repeats)."""
    return argv[len(argv) - argv[::-1].index(flag)]


@pytest.mark.parametrize("recipe", ["table5_ablations", "fig2_time_to_target", "table3_lr_stability", "table8_wikitext103"])
@pytest.mark.slow
def test_recipes_train_each_run_once_per_seed(recipe, tmp_path):
    argvs = dry_run(recipe, tmp_path, SEEDS="3")
    runs = [a for a in argvs if os.path.basename(a[0]) == "fairseq-train" or a[1:2] == ["lr-stability"]]
    seeds = [int(last_value(a, "--seed")) for a in runs]
    assert all(a.count("--seed") == 1 for a in runs)  # not the shared flags' --seed 1, then --seed K
    dirs = [os.path.dirname(last_value(a, "--save-dir")) if "--save-dir" in a else last_value(a, "--out-dir") for a in runs]
    assert seeds == [seed_of(d) for d in dirs] and sorted(seeds) == sorted([1, 2, 3] * (len(runs) // 3))
    # the table (the figure) reads every seed's run, a label given again being the same model's next seed
    analysis = next(a for a in argvs if a[1] in ("ppl-table", "time-to-target", "lr-table", "eval-table"))
    paths = [v.partition("=")[2] or v for v in analyzed(analysis, analysis[1])]
    assert sorted(os.path.dirname(p) if p.endswith(".log") else p for p in paths) == sorted(dirs)


def test_recipes_refuse_a_bad_seeds(tmp_path):
    env = {**os.environ, "DRY_RUN": "1", "PY": sys.executable, "SEEDS": "0"}
    result = subprocess.run(["bash", REPO_ROOT / "recipes" / "table7_hparams.sh", "tiny", tmp_path], env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 2 and "SEEDS must be a positive number of seeds, got '0'" in result.stderr


def load_recipe_script(name):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_dev_log(path, accuracy):
    """A fine-tuning log of fairseq-train --log-format simple: one validation with this dev accuracy."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"2026-01-01 10:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 0.7 | "
                    f"accuracy {accuracy} | num_updates 10\n")  # fmt: skip


def test_glue_table_means_the_seeds_of_each_lr(tmp_path, capsys):
    for lr, scores in (("1e-3", [70.0, 74.0]), ("3e-4", [73.0, 72.0])):
        for seed, score in enumerate(scores, 1):
            write_dev_log(tmp_path / "SameDoc" / f"lr{lr}" / ("train.log" if seed == 1 else f"seed{seed}/train.log"), score)
    load_recipe_script("glue_table").main([str(tmp_path)])
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| SameDoc")]
    # columns lr 3e-4, lr 1e-3 (mean ± std over the seeds), then the best LR by mean (72.5 against 72)
    best = f"72.5 ± {np.std([73, 72], ddof=1):.4g}"
    assert row == f"| SameDoc | accuracy | {best} | 72 ± {np.std([70, 74], ddof=1):.4g} | 3e-4 | {best} |"


def test_bert_ablations_table_pairs_rows_by_seed(tmp_path, capsys):
    dev = {"mlm_nsp": {"1e-3": [70.0, 72.0, 71.0], "3e-4": [60.0, 61.0, 62.0]},
           "ltr": {"1e-3": [74.0, 75.0, 77.0], "3e-4": [80.0, 70.0, 60.0]}}  # fmt: skip
    for row, by_lr in dev.items():
        for seed in (1, 2, 3):
            seed_dir = tmp_path / row / ("" if seed == 1 else f"seed{seed}")
            (seed_dir / "pretrain").mkdir(parents=True)
            write_log(seed_dir / "pretrain" / "train.log", "simple", {6: 20.0}, 10)
            for lr, scores in by_lr.items():
                write_dev_log(seed_dir / "finetune" / "SameDoc" / f"lr{lr}" / "train.log", scores[seed - 1])
    load_recipe_script("bert_tables").main(["ablations", str(tmp_path), "--rows", "mlm_nsp=MLM + NSP", "ltr=LTR"])
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]}
    assert rows["LTR"][2] == "3" and rows["LTR"][5] == f"75.33 ± {np.std([74, 75, 77], ddof=1):.4g} (1e-3)"
    assert rows["MLM + NSP"][6] == "- |"  # the first row is the reference
    assert rows["LTR"][6].rstrip(" |") == interval_text(dev["ltr"]["1e-3"], dev["mlm_nsp"]["1e-3"])


def test_bleu_table_over_seeds(tmp_path):
    test_bleu = {"postln": [20.0, 21.5, 19.0], "preln": [22.0, 22.9, 21.4]}
    runs = []
    for label, scores in test_bleu.items():
        for seed, score in enumerate(scores, 1):
            run_dir = seed_path(tmp_path / label, seed, "")
            run_dir.mkdir(exist_ok=True)
            valid = [{"epoch": 1, "valid_bleu": str(score - 10 + u / 100), "valid_num_updates": str(u)} for u in (100, 200)]
            lines = [f"2026-01-01 10:00:00 | INFO | valid | {json.dumps(v)}\n" for v in valid]
            (run_dir / "train.log").write_text("".join(lines))
            (run_dir / "generate_test.log").write_text(
                f"Translated {100 + seed} sentences (1,000 tokens) in 1.0s\n"
                f"Generate test with beam=5: BLEU = {score} 50.0/30.0/20.0/10.0\n"
            )
            runs.append(f"--run={label}={run_dir}")
    analyze(["bleu-table", *runs, "--out-dir", str(tmp_path / "out")])
    rows = table_rows(tmp_path / "out" / "bleu.md")
    post, pre = test_bleu["postln"], test_bleu["preln"]
    assert rows["preln"][1:3] == ["3", "200"]
    assert rows["postln"][6] == mean_std_text(post, 2)  # the column's largest: 22.1
    assert rows["preln"][5] == mean_std_text(np.array(pre) - 8, 2)  # best valid: the last, score - 8
    assert rows["preln"][7] == interval_text(pre, post, decimals(*interval(pre, post)))
    assert rows["preln"][8] == "101, 102, 103"  # sentences translated, per seed
    assert (tmp_path / "out" / "bleu.png").exists()


def test_grad_curves_band_over_seeds(tmp_path):
    band = mean_over_seeds([{1: 2.0, 2: 4.0}, {1: 4.0, 2: 8.0, 3: 1.0}])  # update 3: not in every seed
    assert band == ([1, 2], [3.0, 6.0], pytest.approx([np.std([2, 4], ddof=1), np.std([4, 8], ddof=1)]))
    runs = []
    for label in ("Baseline", "NormFormer"):
        for seed in (1, 2):
            path = seed_path(tmp_path / label, seed, "grad_norms.jsonl")
            factor = (lambda k: 1.0) if label == "Baseline" else (lambda k: 1 + 0.1 * seed * k)  # noqa: E731
            norms = lambda u: {f"layers.{k}.fc2.weight": 0.1 * seed * (k + 1) / u * factor(k) for k in (0, 1)}  # noqa: E731
            records = [{"update": u, "grad_l1": norms(u)} for u in (1, 2, 3)]
            path.write_text("".join(json.dumps(r) + "\n" for r in records))
            runs.append(f"--run={label}={path}")
    analyze(["grad-curves", *runs, "--table-window", "2:3", "--out-dir", str(tmp_path / "fig")])
    assert (tmp_path / "fig" / "fig3_grad_norms.png").read_bytes()[:4] == b"\x89PNG"
    # Fig. 3 as numbers over updates 2-3: layer k of seed s is 0.1 s (k + 1) (1/2 + 1/3) / 2 × factor
    mean_inverse = (1 / 2 + 1 / 3) / 2
    share = {"Baseline": [0.5, 0.5], "NormFormer": [0.5 / (1 + 0.1 * s) for s in (1, 2)]}  # layer 0 / layer 1
    rows = table_rows(tmp_path / "fig" / "fig3_grad_norms.md")
    layer_0, layer_1 = (np.array([0.1, 0.2]) * mean_inverse, np.array([0.2, 0.4]) * mean_inverse)
    # each column's largest: layer 0's mean (both models), NormFormer's layer 1 mean
    places = decimals(0.15 * mean_inverse), decimals(np.mean([0.2 * 1.1, 0.4 * 1.2]) * mean_inverse)
    assert rows["Baseline"][1:5] == ["2", mean_std_text(layer_0, places[0]), mean_std_text(layer_1, places[1]),
                                     "0.5000 ± 0.0000"]  # fmt: skip
    nf_share = share["NormFormer"], share["Baseline"]
    places = decimals(*interval(*nf_share))
    assert rows["NormFormer"][5] == interval_text(*nf_share, places) + " within seed noise"
    # Fig. 5 over the seeds: NormFormer's seed k over the baseline's seed k, in layer k 1 + 0.1 k * seed
    pairs = [a for b, n in zip(runs[:2], runs[2:]) for a in ("--baseline", b[6:], "--run", n[6:])]
    analyze(["grad-ratio", *pairs, "--window", "1:3", "--out-dir", str(tmp_path / "fig")])
    table = (tmp_path / "fig" / "fig5_grad_ratio.md").read_text()
    assert "mean ± std over 2 seeds" in table
    assert f"| fc2.weight | 1.000 ± 0.000 | 1.150 ± {np.std([1.1, 1.2], ddof=1):.3f} |" in table


def test_metric_table_over_seeds(tmp_path):
    runs = [f"--run=A={log}" for log in fake_runs(tmp_path / "a", BASELINE)]
    runs += [f"--run=B={log}" for log in fake_runs(tmp_path / "b", NORMFORMER)]
    for seconds, run in zip((100, 110, 120), runs[3:]):
        with open(run.split("=", 2)[2], "a") as log:
            log.write(f"2026-01-01 10:01:00 | INFO | fairseq_cli.train | done training in {seconds} seconds\n")
    analyze(["metric-table", *runs, "--metric", "ppl", "--metric", "loss", "--out", str(tmp_path / "t.md")])
    rows = table_rows(tmp_path / "t.md")
    assert rows["B"][1:4] == ["3", "6", "110.0 ± 10.0"] and rows["A"][3] == "—"  # A's logs say no "done training"
    loss = 6.0  # the fake logs' loss at every validation
    assert rows["B"][4:] == [mean_std_text(NORMFORMER, 2), interval_text(NORMFORMER, BASELINE, 3),
                             f"{loss:.3f} ± 0.000", "0 [0, 0] within seed noise"]  # fmt: skip
    with pytest.raises(SystemExit, match="the last validation of .* has no 'accuracy'"):
        analyze(["metric-table", *runs, "--metric", "accuracy", "--out", str(tmp_path / "u.md")])


def test_finetune_tiny_fine_tunes_and_tables_every_seed(tmp_path):
    argvs = dry_run("finetune_tiny", tmp_path, tmp_path, SEEDS="2")
    finetunes = [a for a in argvs if os.path.basename(a[0]) == "fairseq-train" and "--max-positions" in a]
    runs = sorted((last_value(a, "--save-dir"), int(last_value(a, "--seed"))) for a in finetunes)
    want = [(str(tmp_path / task / init / ("seed2" if seed == 2 else "")).rstrip("/"), seed)
            for task in ("qa", "ner", "swag") for init in ("pretrained", "scratch") for seed in (1, 2)]  # fmt: skip
    assert runs == sorted(want)
    tables = [a for a in argvs if "metric-table" in a]
    assert [a[a.index("--out") + 1] for a in tables] == [str(tmp_path / t / "results.md") for t in ("qa", "ner", "swag")]
    assert analyzed(tables[0], "metric-table") == [f"{label}={tmp_path}/qa/{init}{seed}/train.log" for label, init in
                      (("pre-trained", "pretrained"), ("from scratch", "scratch")) for seed in ("", "/seed2")]  # fmt: skip


def test_zero_shot_table_groups_seeds_by_model_name(tmp_path, capsys):
    accuracy = {"preln_lm": [[30.0, 55.0, 51.0, 60.0, 28.0], [32.0, 57.0, 50.0, 61.0, 27.0]],
                "normformer_lm": [[33.0, 58.0, 52.0, 62.0, 30.0], [34.0, 58.5, 53.0, 63.0, 29.0]]}  # fmt: skip
    tasks = ("hellaswag", "piqa", "winogrande", "storycloze", "openbookqa")
    paths = []
    for seed in (0, 1):
        for name, per_seed in accuracy.items():
            result = {"model": {"name": name, "parameters": 1_000_000, "lr": 2e-3, "train_seconds": 60, "cpu": True},
                      "tasks": {t: {"accuracy": a, "chance": 25.0, "normalization": "none", "examples": 100}
                                for t, a in zip(tasks, per_seed[seed])}}  # fmt: skip
            paths.append(tmp_path / f"{name}-{seed}.json")
            paths[-1].write_text(json.dumps(result))
    zero_shot(["table", *map(str, paths)])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.split("|")[1:-1]] for line in lines[1:])}
    hellaswag = accuracy["normformer_lm"][0][0], accuracy["normformer_lm"][1][0]
    assert rows["normformer_lm"][4:6] == ["2", f"{np.mean(hellaswag):.1f} ± {np.std(hellaswag, ddof=1):.1f}"]
    averages = {name: [np.mean(seed) for seed in per_seed] for name, per_seed in accuracy.items()}
    assert rows["normformer_lm"][-1] == interval_text(averages["normformer_lm"], averages["preln_lm"])
    assert rows["preln_lm"][-1] == "–"


@pytest.mark.slow
def test_table1_trains_and_scores_every_seed(tmp_path):
    argvs = dry_run("table1_zero_shot", tmp_path, "paper", tmp_path, SEEDS="2", SIZES="gpt3_small", DATA_BIN="/d",
                    SPM_MODEL="/s.model", TASK_DIR="/tasks")  # fmt: skip
    trains = [(last_value(a, "--save-dir"), last_value(a, "--seed")) for a in argvs if a[0].endswith("fairseq-train")]
    scores = [(last_value(a, "--checkpoint"), last_value(a, "--output")) for a in argvs if a[1:2] == ["score"]]
    archs = ("preln_lm_gpt3_small", "normformer_lm_gpt3_small")
    assert trains == [(f"{tmp_path}/{arch}{d}", seed) for arch in archs for d, seed in (("", "1"), ("/seed2", "2"))]
    assert scores == [(f"{save_dir}/checkpoint_last.pt", f"{tmp_path}/results{d}/{arch}.json")
                      for (save_dir, _), (arch, d) in zip(trains, [(a, d) for a in archs for d in ("", "/seed2")])]  # fmt: skip
    (table,) = [a for a in argvs if a[1:2] == ["table"]]
    assert table[2:-2] == [output for _, output in scores]


def test_lr_table_over_seeds(tmp_path):
    last_good = {"Baseline": [120, 131, 118], "NormFormer": [250, 262, 251]}
    layers = {"Baseline": [0, 0, 1], "NormFormer": [3, 3, 3]}
    runs = []
    for label, updates in last_good.items():
        for seed, (update, layer) in enumerate(zip(updates, layers[label]), 1):
            run_dir = seed_path(tmp_path / label, seed, "")
            run_dir.mkdir(exist_ok=True)
            overflow = {"update": update + 1, "layer": layer, "operation": "fc1", "max_abs": 7e4}
            result = {"outcome": "diverged", "reason": "activation overflow", "peak_lr": 2.0, "warmup_updates": 1000,
                      "last_good_update": update, "lr_reached": 2.0 * update / 1000, "first_overflow": overflow,
                      "log": str(run_dir / "train.log")}  # fmt: skip
            (run_dir / "result.json").write_text(json.dumps(result))
            runs.append(f"--run={label}={run_dir}")
    analyze(["lr-table", *runs, "--out", str(tmp_path / "t3.md")])
    rows = table_rows(tmp_path / "t3.md")
    nf = last_good["NormFormer"]
    assert rows["NormFormer"][1:5] == ["2", "3", "diverged", mean_std_text(nf, 1)]  # the column's largest: 254.3
    assert rows["Baseline"][6:8] == ["0, 0, 1", "fc1"] and rows["NormFormer"][6] == "3"  # per seed when they differ
    assert rows["NormFormer"][10] == interval_text(nf, last_good["Baseline"], 1)  # 131.3
