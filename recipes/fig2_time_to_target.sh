#!/usr/bin/env bash
# Figure 2: validation perplexity of a Pre-LN baseline and a NormFormer against updates and wall
# time; the star marks the first validation at which NormFormer reaches the baseline's final
# perplexity ("reaches the same perplexity N% faster").
#
#   recipes/fig2_time_to_target.sh [paper|tiny|small] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# Writes OUT_DIR/fig2_time_to_target.{png,md,json} and OUT_DIR/commands.sh. The two runs are
# shared with Figures 3-5 (work/recipes/lm-pair-SCALE, or PAIR=...). SEEDS=N: N pairs (seed K's baseline
# against seed K's NormFormer), the fraction of updates as mean ± std and a 95% interval over the seeds.
source "$(dirname "$0")/_lm_common.sh"
pair_runs fig2_time_to_target  # the pair, then normformer-analyze time-to-target (recipes/sweeps/fig2_time_to_target.yaml)
