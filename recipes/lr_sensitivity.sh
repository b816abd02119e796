#!/usr/bin/env bash
# The LR sensitivity study (issue 50; Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer training
# instabilities"): does a normalization scheme's advantage over Pre-LN grow or shrink with width?
#
#   recipes/lr_sensitivity.sh [tiny|small] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# The grid is recipes/sweeps/lr_sensitivity.yaml, run by normformer-sweep on this machine, JOBS points at a time (the
# same spec runs on SLURM: docs/cluster.md):
# 1. Ladder: every scheme (Pre-LN; Pre-LN + QK-norm; Pre-LN + z-loss; NormFormer; sandwich norm; RMSNorm; Mix-LN;
#    LayerNorm Scaling; OLMo 2's order; DyT with alpha 0.8/0.2/0.2; ReZero) at every LR from 1e-4 to 5e-1 (12 LRs),
#    at each width of the scale (small: 64, 128, 256; tiny: 32, 64), 4 layers, 300 updates, one seed, in
#    OUT/SIZE/grid/SCHEME-lrLR, each logging every update's loss and the scale diagnostics every 10 updates.
# 2. Seeds at the widest width (WIDE_SEEDS, default 3): each scheme at its best LR there, so that the best losses
#    the claims rest on have paired intervals: OUT/WIDEST/schemes.md (normformer-analyze sweep, each scheme's
#    difference to Pre-LN paired by seed) and OUT/WIDEST/grid/SCHEME.md (each scheme's LRs at that width).
# 3. OUT/lr_sensitivity.md (per scheme and width: the loss at initialisation, the best loss and its LR, the LR
#    sensitivity, the largest stable LR, the diagnostics at that LR; each width's losses and diagnostics by LR),
#    OUT/lr_sensitivity_trend.md (each across widths, and each scheme's difference to Pre-LN per width),
#    OUT/lr_sensitivity.json, OUT/lr_sensitivity.png (the loss against the LR, a panel per scheme, a line per
#    width) and OUT/lr_sensitivity_diagnostics.png (each diagnostic against the LR, a panel per width, a line per
#    scheme): normformer-analyze lr-sensitivity (docs/analysis.md).
# A diverged run is marked so and never trained again; finished runs are reused (recipes/_run_dir.sh), so a second
# call only adds what the first did not finish.
SCALES="tiny small" SEEDS=1
source "$(dirname "$0")/_lm_common.sh"
WIDEST="$([ "$SCALE" = small ] && echo w256 || echo w64)"  # the spec's widest size at the scale
sweep lr_sensitivity
SEEDS="${WIDE_SEEDS:-3}" sweep lr_sensitivity --set "size=$WIDEST"
if [ "$DRY_RUN" = 1 ]; then exit; fi
analyze sweep "$OUT/$WIDEST"
analyze lr-sensitivity "$OUT"
cat "$OUT/lr_sensitivity.md"
