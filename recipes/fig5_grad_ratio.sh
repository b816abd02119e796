#!/usr/bin/env bash
# Figure 5: NormFormer's average L1 gradient norm over the baseline's, per parameter and layer,
# averaged over a window of updates (NormFormer lowers early layers' gradients relative to late ones).
#
#   recipes/fig5_grad_ratio.sh [paper|tiny|small] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# WINDOW=START:END (paper scale default 1:10000, tiny 1:200). SEEDS=N: each seed's ratios (seed K's NormFormer
# over seed K's baseline), their mean ± std. Writes OUT_DIR/fig5_grad_ratio.{png,md}.
source "$(dirname "$0")/_lm_common.sh"
pair_runs
WINDOW="${WINDOW:-$([ "$SCALE" = paper ] && echo 1:10000 || echo 1:200)}"
analyze grad-ratio --seeds "$SEEDS" --baseline "Baseline=$PAIR/baseline/grad_norms.jsonl" \
  --run "NormFormer=$PAIR/normformer/grad_norms.jsonl" --window "$WINDOW" --out-dir "$OUT"
