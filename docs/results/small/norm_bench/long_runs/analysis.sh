# The table and curves of the bench page's "3,000 updates" (seed 1 of each run so far), from the repository root
# after RUNS_ARCHIVE=docs/results/small/norm_bench/long_runs recipes/norm_bench_long.sh small (which restores the
# archived runs into work/recipes/norm_bench_long-small on another machine).
O=work/recipes/norm_bench_long-small/grid
.venv/bin/normformer-analyze ppl-table --run "Pre-LN (lr 3e-3)=$O/preln-lr3e-3/train.log" \
  --run "NormFormer (lr 3e-3)=$O/normformer-lr3e-3/train.log" --run "NormFormer (lr 6e-3)=$O/normformer-lr6e-3/train.log" \
  --run "Sandwich norm (lr 6e-3)=$O/sandwich-lr6e-3/train.log" --title "Seed 1, 3,000 updates, small scale" \
  --out docs/results/small/norm_bench/long_runs/seed1.md --plot docs/results/small/norm_bench/long_runs/seed1_curves.png
