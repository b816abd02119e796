#!/usr/bin/env bash
# The normalization bench (docs/results/small/norm_bench/): NormFormer's open questions, and the schemes that
# came after it, each measured on the causal LM as the paper's tables measure NormFormer.
#
#   recipes/norm_bench.sh [tiny|small] [OUT_DIR]     (see recipes/_lm_common.sh; default SEEDS=3)
#
# The grid is recipes/sweeps/norm_bench.yaml, run by normformer-sweep on this machine, JOBS points at a time
# (the same spec runs on SLURM, at your size and on your data: docs/cluster.md); normformer-analyze sweep writes
# the tables:
# 1. Grid: every scheme (Pre-LN, Post-LN, NormFormer, sandwich norm, QK-norm, RMSNorm, DyT, DeepNorm) at three LRs
#    of the spec's ladder, one seed. While a scheme's best is the lowest or the highest LR it tried, the next LR of
#    the ladder is trained too, so that each grid brackets its best (OUT/grid/SCHEME.md). A run that diverges is
#    marked so and not trained again.
# 2. Seeds: each scheme at its best LR, SEEDS times (the grid's run is seed 1): OUT/schemes.md (final validation
#    perplexity, each scheme's difference to Pre-LN as a 95% interval paired by seed; a scheme that diverged is
#    named below the table; OUT/schemes_curves.png) and OUT/time_to_target/SCHEME/ (the fraction of Pre-LN's
#    updates a scheme needs to reach Pre-LN's final perplexity).
# 3. Placement: NormFormer's operations in the first half of the layers only, the second half only, and all, at
#    NormFormer's best LR, SEEDS times: OUT/placement.md, OUT/placement_halves.md (the first half against the second,
#    paired by seed) and OUT/grad_norms/ (FC2's weight gradient per layer, Fig. 3's measure, over updates 151-200).
# 4. FFN norm: NormFormer with its FFN LN a LayerNorm, a LayerNorm without bias and an RMSNorm: OUT/ffn_norm.md.
# 5. Stability: the Table 3 test of each scheme at its shape (normformer-analyze lr-stability: warmup to PEAK_LR,
#    default 2.0, over WARMUP updates, default 1000; fp32, stops at the first activation above 65504), one seed:
#    OUT/stability.md.
# Every training run records gradient norms every 5 updates (grad_norms.jsonl). Finished runs are reused
# (recipes/_run_dir.sh), so a second call only adds what the first did not finish.
SCALES="tiny small" SEEDS="${SEEDS:-3}"
source "$(dirname "$0")/_lm_common.sh"
sweep norm_bench ${PEAK_LR:+--stability-peak-lr "$PEAK_LR"} ${WARMUP:+--stability-warmup-updates "$WARMUP"}
if [ "$DRY_RUN" = 1 ]; then exit; fi
analyze sweep "$OUT"
cat "$OUT/schemes.md"
