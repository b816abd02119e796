# The tables and curves of the bench page's "3,000 updates", from the repository root after
# RUNS_ARCHIVE=docs/results/small/norm_bench/long_runs recipes/norm_bench_long.sh small (which restores the archived
# runs into work/recipes/norm_bench_long-small on another machine, and writes its own tables there: schemes.md,
# schemes_curves.png, time_to_target/, grid/SCHEME.md, by normformer-analyze sweep).
O=work/recipes/norm_bench_long-small
D=docs/results/small/norm_bench/long_runs
cp "$O/schemes.md" "$O/schemes_curves.png" "$D/"
mkdir -p "$D/grid" && cp "$O"/grid/*.md "$D/grid/"
rm -rf "$D/time_to_target" && cp -r "$O/time_to_target" "$D/"
# every run of the grid (seed 1 at each LR)
.venv/bin/normformer-analyze ppl-table --run "Pre-LN (lr 3e-3)=$O/grid/preln-lr3e-3/train.log" \
  --run "NormFormer (lr 3e-3)=$O/grid/normformer-lr3e-3/train.log" --run "NormFormer (lr 6e-3)=$O/grid/normformer-lr6e-3/train.log" \
  --run "Sandwich norm (lr 3e-3)=$O/grid/sandwich-lr3e-3/train.log" --run "Sandwich norm (lr 6e-3)=$O/grid/sandwich-lr6e-3/train.log" \
  --title "Seed 1, 3,000 updates, small scale" --out "$D/seed1.md" --plot "$D/seed1_curves.png"
# each run's validation perplexity at updates 300, 600, 900, 1,500 and 3,000, per seed
PYTHONPATH=. .venv/bin/python - > "$D/by_update.md" <<'PY'
from pathlib import Path
from fairseq_normformer.analysis.training_log import read_training_log
UPDATES, grid = (300, 600, 900, 1500, 3000), Path("work/recipes/norm_bench_long-small/grid")
RUNS = {"Pre-LN, 3e-3": "preln-lr3e-3", "NormFormer, 3e-3": "normformer-lr3e-3", "NormFormer, 6e-3": "normformer-lr6e-3",
        "Sandwich norm, 3e-3": "sandwich-lr3e-3", "Sandwich norm, 6e-3": "sandwich-lr6e-3"}
print("Validation perplexity by update, each run and seed (3,000 updates, small scale)\n")
print("| run | seed | " + " | ".join(f"update {u:,}" for u in UPDATES) + " |\n|---|---|" + "---|" * len(UPDATES))
for label, name in RUNS.items():
    for seed, log in ((1, grid / name / "train.log"), (2, grid / name / "seed2" / "train.log")):
        if log.exists():
            ppl = {r["num_updates"]: r["ppl"] for r in read_training_log(log).valid}
            print(f"| {label} | {seed} | " + " | ".join(f"{ppl[u]:.1f}" for u in UPDATES) + " |")
PY
