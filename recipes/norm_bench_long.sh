#!/usr/bin/env bash
# The normalization bench's leaders trained 10x longer (issue 50, step 5): does the early lead of NormFormer and the
# sandwich norm over Pre-LN at 300 updates (docs/results/small/norm_bench/) persist, shrink or vanish by 3,000?
#
#   recipes/norm_bench_long.sh [tiny|small] [OUT_DIR]     (see recipes/_lm_common.sh; default SEEDS=2)
#
# The runs are recipes/sweeps/norm_bench_long.yaml, run by normformer-sweep on this machine, JOBS at a time (the same
# spec runs on SLURM: docs/cluster.md): Pre-LN, NormFormer and the sandwich norm, each at its best LR of the
# 300-update bench (3e-3, 6e-3, 6e-3) and the latter two at Pre-LN's too, 4 layers x 256, 3,000 updates (300 of
# warmup, then polynomial decay; validation every 300); then SEEDS seeds at each one's best LR of those. OUT/schemes.md: each scheme's final validation perplexity and its difference to Pre-LN, paired by
# seed; OUT/schemes_curves.png; OUT/time_to_target/SCHEME/: the fraction of Pre-LN's updates a scheme needs to reach
# Pre-LN's final perplexity (normformer-analyze sweep). A run saves a checkpoint every 300 updates, so a second
# call continues what the first did not finish (finished runs are reused: recipes/_run_dir.sh; RUNS_ARCHIVE=DIR
# carries them to another machine: docs/cluster.md). About 60 minutes a run on 2 CPU cores with two at a time
# (measured on an AVX2 EPYC): about 4 hours for the 8 runs.
SCALES="tiny small" SEEDS="${SEEDS:-2}"
source "$(dirname "$0")/_lm_common.sh"
sweep norm_bench_long
if [ "$DRY_RUN" = 1 ]; then exit; fi
analyze sweep "$OUT"
cat "$OUT/schemes.md"
