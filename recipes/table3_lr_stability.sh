#!/usr/bin/env bash
# Table 3: the LR stability test. The learning rate warms up linearly towards a very large peak over
# the whole run; each model stops where it diverges. Reported: the last good update, the learning
# rate reached, and the operation and layer whose activations first overflowed (> 65504, the fp16
# maximum, or non-finite), found by forward hooks (normformer-analyze lr-stability, docs/analysis.md).
#
#   recipes/table3_lr_stability.sh [paper|tiny|small] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# Paper scale: 125M baseline and NormFormer in fp16 on GPUs (fairseq's loss scaler decides when the
# run cannot recover); PEAK_LR and WARMUP default to `normformer-paper-settings --table 3` (this
# package's choice, the paper's text does not give its schedule). Tiny: fp32 on CPU, stopping at the first
# activation above 65504; PEAK_LR 2.0 over WARMUP 1000 updates. The runs are recipes/sweeps/table3_lr_stability.yaml,
# run by normformer-sweep (the same spec runs on SLURM: docs/cluster.md). SEEDS=N runs each model N times
# (docs/recipes.md). Writes OUT_DIR/table3.md.
source "$(dirname "$0")/_lm_common.sh"
sweep table3_lr_stability ${PEAK_LR:+--stability-peak-lr "$PEAK_LR"} ${WARMUP:+--stability-warmup-updates "$WARMUP"}
