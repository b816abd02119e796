#!/usr/bin/env bash
# Table 8: Wikitext-103. Baevski & Auli's adaptive-input transformer (preln_lm_wiki103) and its
# NormFormer (normformer_lm_wiki103), trained with fairseq's published Wikitext-103 recipe
# (examples/language_model: NAG, cosine schedule, 286k updates on 8 GPUs), evaluated with
# fairseq-eval-lm on valid and test (context window 400 within blocks of 512).
#
#   recipes/table8_wikitext103.sh [paper|tiny] [OUT_DIR]     (see recipes/_lm_common.sh)
#
# Paper scale: DATA = wikitext-103 binarized as fairseq's examples/language_model/README.md does;
# WORLD_SIZE 8 (the recipe's 3072 tokens x update-freq 3 per GPU). Tiny: a 4x64 adaptive-input model
# (cutoffs 500,1000 for the 2k vocabulary) on the docstring corpus, 400 updates, same optimiser.
# The runs and their evaluations are recipes/sweeps/table8_wikitext103.yaml, run by normformer-sweep (the same spec runs
# on SLURM: docs/cluster.md). SEEDS=N trains and evaluates each model N times (docs/recipes.md). Writes OUT_DIR/table8.md.
SCALES="paper tiny"  # no small scale: its own shapes
source "$(dirname "$0")/_lm_common.sh"
if [ "$SCALE" = paper ]; then
  sweep table8_wikitext103  # the two models, every seed, evaluated: recipes/sweeps/table8_wikitext103.yaml
else
  UPDATES="${UPDATES:-400}"
  sweep table8_wikitext103 --set "lr_period=$((UPDATES * 9 / 10))" --set "validate_interval=$((UPDATES / 4))"
fi
show_table "$OUT/table8.md"
