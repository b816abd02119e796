# The tables and figures of this page, from the repository root after
# RUNS_ARCHIVE=docs/results/small/lr_sensitivity/runs recipes/lr_sensitivity.sh small (which restores the archived
# runs into work/recipes/lr_sensitivity-small on another machine and trains only what is missing).
# SIZES: the widths read.
O=work/recipes/lr_sensitivity-small
D=docs/results/small/lr_sensitivity
SIZES=${SIZES:-w64 w128 w256}
# per scheme and width: l0, the best loss and its LR, the LR sensitivity, the largest stable LR, the diagnostics
# there; each width's losses and diagnostics by LR; the trend across widths; the two figures
.venv/bin/normformer-analyze lr-sensitivity "$O" $(printf -- '--size %s ' $SIZES) --out-dir "$D"
# Wortsman et al.'s two instabilities over the updates, at lr 1e-1 and 5e-1 at each width: Pre-LN, QK-norm, z-loss
for lr in 1e-1 5e-1; do
  for size in $SIZES; do
    G=$O/$size/grid
    .venv/bin/normformer-analyze diagnostics --run "Pre-LN=$G/preln-lr$lr/diagnostics.jsonl" \
      --run "Pre-LN + QK-norm=$G/qknorm-lr$lr/diagnostics.jsonl" --run "Pre-LN + z-loss=$G/zloss-lr$lr/diagnostics.jsonl" \
      --out-dir "$D/diagnostics_lr$lr/$size"
  done
done
# each scheme at its best LR of the 256 width, 3 seeds, against Pre-LN paired by seed: the recipe's part 2 wrote it
# (normformer-analyze sweep "$O/w256")
if [[ " $SIZES " == *" w256 "* ]]; then cp "$O/w256/schemes.md" "$D/schemes_w256.md"; fi
