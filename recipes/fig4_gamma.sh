#!/usr/bin/env bash
# Figure 4: the distribution of the learned γ of the added operations (Post-Attn LN, FFN LN,
# HeadScale) in each layer of a trained NormFormer.
#
#   recipes/fig4_gamma.sh [paper|tiny|small] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# Writes OUT_DIR/fig4_gamma.{png,md}.
source "$(dirname "$0")/_lm_common.sh"
pair_runs
analyze gamma "$PAIR/normformer/checkpoints/checkpoint_last.pt" --title "NormFormer ($SCALE scale)" --out-dir "$OUT"
