#!/usr/bin/env bash
# Figure 3: the average L1 norm of the gradient of FC2's weight in each layer, early in training,
# for a Pre-LN baseline and a NormFormer (the baseline's early layers get much larger gradients).
#
#   recipes/fig3_grad_norms.sh [paper|tiny|small] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# EARLY=N plots updates 1..N (paper scale default 10000, tiny 200). SEEDS=N: the mean over the seeds with a
# band of ± one standard deviation. Writes OUT_DIR/fig3_grad_norms.png and fig3_grad_norms.md: each layer's mean |grad|
# over the last quarter of those updates, and layer 0's over the mean of the others (NormFormer's against the
# baseline's, a 95% interval paired by seed).
source "$(dirname "$0")/_lm_common.sh"
pair_runs
EARLY="${EARLY:-$([ "$SCALE" = paper ] && echo 10000 || echo 200)}"
analyze grad-curves --seeds "$SEEDS" --run "Baseline=$PAIR/baseline/grad_norms.jsonl" \
  --run "NormFormer=$PAIR/normformer/grad_norms.jsonl" --param fc2.weight --updates "1:$EARLY" \
  --table-window "$((EARLY * 3 / 4 + 1)):$EARLY" --out-dir "$OUT"
