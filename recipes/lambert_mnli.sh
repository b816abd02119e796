#!/usr/bin/env bash
# LaMBERT at paper scale: pre-train lambert_base with MLM + NSP (same-document negatives, the
# short-sequence phase), then fine-tune it on MNLI through fairseq's sentence_prediction
# (recipes/table2_glue.sh with TASKS=MNLI). docs/lambert.md.
#
#   DATA_BIN=corpus/data-bin SPM_MODEL=corpus/spm.model GLUE_DIR=glue_data OUT=work/lambert_mnli \
#   recipes/lambert_mnli.sh
#
# DATA_BIN: BERT-format text binarized by fairseq-preprocess (normformer-build-corpus --format bert
# for a small one). The issue gives no LaMBERT optimizer settings, so pre-training uses BERT-base's
# (Devlin et al. 2019, App. A.2): 256 pairs a batch, 1M updates, Adam lr 1e-4, β (0.9, 0.999), weight
# decay 0.01, 10k warmup then linear decay, dropout 0.1; the short phase (≤ 6 segments) covers
# SHORT_PHASE_EPOCHS of MAX_EPOCH epochs (90%). Fine-tuning: BERT's MNLI learning rates.
# Runs follow recipes/_run_dir.sh: a finished run is reused, DRY_RUN=1 prints the commands, every
# command is appended to OUT/commands.sh.
#
# Optional: ARCH (lambert_base; normformer_lambert_base for NormFormer-LaMBERT), MODEL_FLAGS,
# MAX_UPDATE, MAX_EPOCH (40), SHORT_PHASE_EPOCHS (36), BATCH (256: per GPU, × UPDATE_FREQ × GPUs),
# UPDATE_FREQ (1), LR (1e-4), WARMUP (10000), FP16_FLAGS, EXTRA_FLAGS (both stages), TASKS (MNLI),
# LRS ("2e-5 3e-5 5e-5"), MAX_POSITIONS, and table2_glue.sh's smoke settings (TOTAL_UPDATES, WARMUP_UPDATES, ...).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
source "$HERE/_python.sh"  # PY, BIN
: "${DATA_BIN:?set DATA_BIN to BERT-format pre-training data (fairseq-preprocess output)}"
: "${SPM_MODEL:?set SPM_MODEL to the SentencePiece model of DATA_BIN}"
: "${GLUE_DIR:?set GLUE_DIR to the directory of the GLUE tasks (MNLI/)}"
: "${OUT:?set OUT to a work directory}"
ARCH=${ARCH:-lambert_base}
MODEL_FLAGS=${MODEL_FLAGS:-}
MAX_UPDATE=${MAX_UPDATE:-1000000}
MAX_EPOCH=${MAX_EPOCH:-40}
SHORT_PHASE_EPOCHS=${SHORT_PHASE_EPOCHS:-36}
BATCH=${BATCH:-256}
UPDATE_FREQ=${UPDATE_FREQ:-1}
LR=${LR:-1e-4}
WARMUP=${WARMUP:-10000}
FP16_FLAGS=${FP16_FLAGS-"--fp16 --fp16-init-scale 4 --threshold-loss-scale 1 --fp16-scale-window 128"}
EXTRA_FLAGS=${EXTRA_FLAGS:-}
RECIPE=lambert_mnli
mkdir -p "$OUT"
source "$HERE/_run_dir.sh"
refuse_unread_data  # reads no DATA (its data: see above)

PRETRAIN=$OUT/pretrain
echo "[lambert_mnli] pre-training $ARCH -> $PRETRAIN/train.log"
# shellcheck disable=SC2086  # MODEL_FLAGS, FP16_FLAGS and EXTRA_FLAGS are lists of flags
run_in "$PRETRAIN" "$PRETRAIN/train.log" "$BIN/fairseq-train" "$DATA_BIN" --user-dir "$REPO/fairseq_normformer" \
  --task lambert_mlm_nsp --criterion mlm_nsp --nsp-negatives same-document \
  --short-phase-segments 6 --short-phase-epochs "$SHORT_PHASE_EPOCHS" \
  --arch "$ARCH" $MODEL_FLAGS --dropout 0.1 --attention-dropout 0.1 \
  --optimizer adam --adam-betas "(0.9, 0.999)" --adam-eps 1e-06 --weight-decay 0.01 --clip-norm 1.0 \
  --lr-scheduler polynomial_decay --lr "$LR" --warmup-updates "$WARMUP" --total-num-update "$MAX_UPDATE" \
  --max-update "$MAX_UPDATE" --max-epoch "$MAX_EPOCH" --batch-size "$BATCH" --update-freq "$UPDATE_FREQ" \
  --required-batch-size-multiple 1 --no-epoch-checkpoints --save-dir "$PRETRAIN" --seed 1 \
  --log-format simple --log-interval 100 $FP16_FLAGS $EXTRA_FLAGS

# Fine-tuning's position bound is the model's: (max segments - 1) x segment length + 3 = 509 by default
# (set MAX_POSITIONS when MODEL_FLAGS changes --segment-length or --max-segments).
MAX_POSITIONS=${MAX_POSITIONS:-$(PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c "
from fairseq_normformer.models.lambert import LambertOptions as o, SPECIAL_TOKENS_PER_PAIR, max_pair_tokens
print(max_pair_tokens(o.segment_length, o.max_segments) + SPECIAL_TOKENS_PER_PAIR)")}
CHECKPOINT=$PRETRAIN/checkpoint_last.pt ARCH=$ARCH MODEL_FLAGS=$MODEL_FLAGS DATA_BIN=$DATA_BIN SPM_MODEL=$SPM_MODEL \
  GLUE_DIR=$GLUE_DIR OUT=$OUT/finetune TASKS=${TASKS:-MNLI} LRS=${LRS:-"2e-5 3e-5 5e-5"} \
  MAX_POSITIONS=$MAX_POSITIONS FP16_FLAGS=$FP16_FLAGS EXTRA_FLAGS=$EXTRA_FLAGS PY=$PY \
  bash "$HERE/table2_glue.sh"
