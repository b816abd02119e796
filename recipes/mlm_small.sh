#!/usr/bin/env bash
# The masked-LM study at the small scale (docs/results/small/mlm/): BERT pre-training (masked LM + next-sentence
# prediction, --task mlm_nsp) of a Pre-LN baseline (preln_bert_base) and NormFormer (normformer_bert_base) at
# 4 layers x 256, 4 heads, FFN 1024, on the Python manual in BERT's format (normformer-build-corpus
# --python-docs --format bert, needs python3.11-doc), 32 pairs of 128 tokens an update, RoBERTa's Adam.
#
#   recipes/mlm_small.sh small [OUT_DIR]           (default OUT_DIR: work/recipes/mlm_small-small)
#
# 1. LR sweep, one seed: Pre-LN at every LR of PRELN_LRS, NormFormer at every LR of NF_LRS (LRS sets both;
#    defaults: the grids of docs/results/small/mlm/embedding_ln/, each model's best inside its grid): OUT/lr_sweep.md.
# 2. Seeds: each model at its own LR (BASE_LR, NF_LR; default: the sweep's best, docs/results/small/mlm/embedding_ln/)
#    SEEDS times (the sweep's run is seed 1): OUT/seeds.md (mean ± std, NormFormer's difference as a 95%
#    interval paired by seed), OUT/mlm_curves.{md,png} (validation MLM accuracy and perplexity against
#    updates, next to the unigram baseline's) and OUT/time_to_target/ (the fraction of the baseline's updates
#    NormFormer needs to reach the baseline's final MLM perplexity, normformer-analyze time-to-target).
# MODELS (default "preln normformer") adds the normalization bench's masked-LM schemes (recipes/norm_bench.sh):
#    sandwich (--sandwich-norm), qknorm (--qk-norm), rmsnorm (--norm-type rmsnorm), each Pre-LN's arch plus its
#    switch, swept over SCHEME_LRS (default 5e-4 1e-3 2e-3; LRS sets it too), widened by the next LR of
#    1.25e-4, 2.5e-4, ..., 8e-3 while its best is the lowest or the highest LR (normformer-analyze lr-grid --metric
#    mlm_ppl: OUT/grid-NAME.md), and trained with seeds at that best; their time to Pre-LN's final perplexity goes to
#    OUT/time_to_target-NAME/.
# UPDATES (default 1000) sets every run's length (10% warmup, then linear decay, validation every UPDATES/10);
# PRECISION=bf16 (the default) trains with --bf16, PRECISION=fp32 without; EXTRA_FLAGS are added to every
# fairseq-train command (e.g. --no-layernorm-embedding, the first study of docs/results/small/mlm/). Two
# single-threaded runs at a time (JOBS). Runs follow recipes/_run_dir.sh: finished runs are reused, OUT/commands.sh
# records every command, DRY_RUN=1 prints them.
SCALES=small
source "$(dirname "$0")/_lm_common.sh"
PRELN_LRS="${LRS:-${PRELN_LRS:-2.5e-4 5e-4 1e-3 2e-3 4e-3}}" NF_LRS="${LRS:-${NF_LRS:-5e-4 1e-3 2e-3}}"
SCHEME_LRS="${LRS:-${SCHEME_LRS:-5e-4 1e-3 2e-3}}"
LADDER=(1.25e-4 2.5e-4 5e-4 1e-3 2e-3 4e-3 8e-3)  # where a scheme's grid is widened
read -ra MODELS <<<"${MODELS:-preln normformer}"
BASE_LR="${BASE_LR:-1e-3}" NF_LR="${NF_LR:-1e-3}"
UPDATES="${UPDATES:-1000}"
PRECISION="${PRECISION:-bf16}"
case "$PRECISION" in
  fp32) PRECISION_FLAGS=() ;;
  bf16) PRECISION_FLAGS=(--bf16) ;;
  *) echo "PRECISION must be fp32 or bf16, got '$PRECISION'" >&2; exit 2 ;;
esac
read -ra EXTRA <<<"${EXTRA_FLAGS:-}"

CORPUS="$REPO/work/recipes/corpus-pydocs-bert-v2000"
[ "$DRY_RUN" = 1 ] || run "$BIN/normformer-build-corpus" --out "$CORPUS" --format bert --python-docs --vocab-size 2000 >&2
COMMON=("$CORPUS/data-bin" --task mlm_nsp --criterion mlm_nsp --tokens-per-sample 128 --batch-size 32
  --encoder-layers 4 --encoder-embed-dim 256 --encoder-ffn-embed-dim 1024 --encoder-attention-heads 4
  --dropout 0.1 --attention-dropout 0.1 --optimizer adam --adam-betas "(0.9, 0.98)" --adam-eps 1e-06
  --weight-decay 0.01 --clip-norm 1.0 --lr-scheduler polynomial_decay --warmup-updates $((UPDATES / 10))
  --total-num-update "$UPDATES" --max-update "$UPDATES" --validate-interval-updates $((UPDATES / 10))
  --validate-interval 1000 --save-interval-updates 100000 --no-epoch-checkpoints --required-batch-size-multiple 1
  --cpu --num-workers 0 --log-format simple --log-interval 50 "${PRECISION_FLAGS[@]}" "${EXTRA[@]}")
declare -A ARCH=([preln]=preln_bert_base [normformer]=normformer_bert_base [sandwich]=preln_bert_base
  [qknorm]=preln_bert_base [rmsnorm]=preln_bert_base)
declare -A SWITCHES=([sandwich]=--sandwich-norm [qknorm]=--qk-norm [rmsnorm]="--norm-type rmsnorm")
declare -A NAME=([preln]="Pre-LN" [normformer]=NormFormer [sandwich]="Sandwich norm" [qknorm]=QK-norm [rmsnorm]=RMSNorm)
declare -A GRID=([preln]="$PRELN_LRS" [normformer]="$NF_LRS" [sandwich]="$SCHEME_LRS" [qknorm]="$SCHEME_LRS"
  [rmsnorm]="$SCHEME_LRS")
for model in "${MODELS[@]}"; do
  if [ -z "${ARCH[$model]:-}" ]; then echo "MODELS: unknown model '$model' (known: ${!ARCH[*]})" >&2 && exit 2; fi
done
METRICS=(--metric mlm_ppl --metric mlm_accuracy --metric nsp_accuracy)
# model_args MODEL: into the array MODEL_ARGS, its arch and switches
model_args() { read -ra MODEL_ARGS <<<"--arch ${ARCH[$1]} ${SWITCHES[$1]:-}"; }

# train_grid MODEL: MODEL at every LR of its grid, seed 1 (finished runs are reused)
train_grid() {
  local lr
  model_args "$1"
  for lr in ${GRID[$1]}; do train "$OUT/$1-lr$lr" "${COMMON[@]}" "${MODEL_ARGS[@]}" --lr "$lr" --seed 1; done
}

# best_of_grid MODEL: LR[MODEL], the best of its grid by mlm_ppl; widens GRID[MODEL] along LADDER when the best
# is at an edge (returns 1 when it did not)
best_of_grid() {
  local model="$1" lr runs=() position widened
  read -ra runs <<<"${GRID[$model]}"
  if [ "$DRY_RUN" = 1 ]; then LR[$model]="${runs[$((${#runs[@]} / 2))]}" && return 1; fi  # the grid's middle
  runs=()
  for lr in ${GRID[$model]}; do runs+=(--run "$lr=$OUT/$model-lr$lr/train.log"); done
  read -r LR[$model] position < <(analyze lr-grid "${runs[@]}" --metric mlm_ppl --out "$OUT/grid-$model.md" \
    --title "${NAME[$model]}, masked LM, small scale, $PRECISION: the last validation's mlm_ppl by LR (seed 1)")
  if [ -z "${LR[$model]}" ]; then exit 1; fi  # lr-grid said why
  widened="$(widen_grid "${GRID[$model]}" "$position" "${LADDER[@]}")"
  [ -n "$widened" ] && GRID[$model]="$widened"
}

# 1. the LR sweep, one seed; a scheme's grid (a model without a given LR) is widened until its best is inside
declare -A LR=([preln]="$BASE_LR" [normformer]="$NF_LR")
pending=()
for model in "${MODELS[@]}"; do
  train_grid "$model"
  if [ -z "${LR[$model]:-}" ]; then pending+=("$model"); fi
done
while ((${#pending[@]})); do
  wait_runs
  widened=()
  for model in "${pending[@]}"; do if best_of_grid "$model"; then widened+=("$model") && train_grid "$model"; fi; done
  pending=("${widened[@]}")
done
wait_runs
TABLE_RUNS=()
for model in "${MODELS[@]}"; do
  for lr in ${GRID[$model]}; do TABLE_RUNS+=(--run "${NAME[$model]}, lr $lr=$OUT/$model-lr$lr/train.log"); done
done
analyze metric-table "${TABLE_RUNS[@]}" "${METRICS[@]}" --out "$OUT/lr_sweep.md" \
  --title "Masked LM (MLM + NSP), small scale, $PRECISION: the last validation after $UPDATES updates, by LR (seed 1)"

# 2. each model at its own LR (the schemes': their sweep's best), SEEDS seeds
TABLE_RUNS=()
for model in "${MODELS[@]}"; do
  model_args "$model"
  for seed in $(seq "$SEEDS"); do
    if [ "$seed" = 1 ] && [[ " ${GRID[$model]} " == *" ${LR[$model]} "* ]]; then continue; fi  # the sweep's run
    train "$(seed_dir "$OUT/$model-lr${LR[$model]}" "$seed")" "${COMMON[@]}" "${MODEL_ARGS[@]}" --lr "${LR[$model]}" --seed "$seed"
  done
  seed_runs "${NAME[$model]}, lr ${LR[$model]}" "$OUT/$model-lr${LR[$model]}" train.log
done
wait_runs
analyze metric-table "${TABLE_RUNS[@]}" "${METRICS[@]}" --out "$OUT/seeds.md" \
  --title "Masked LM (MLM + NSP), small scale, $PRECISION: each model at its best LR, $SEEDS seeds, $UPDATES updates"
analyze mlm-curves "${TABLE_RUNS[@]}" --data "$CORPUS/data-bin" --out-dir "$OUT"
for model in "${MODELS[@]}"; do
  if [ "$model" = preln ] || [[ " ${MODELS[*]} " != *" preln "* ]]; then continue; fi
  PAIRS=()
  for seed in $(seq "$SEEDS"); do
    PAIRS+=(--baseline "$(seed_dir "$OUT/preln-lr$BASE_LR" "$seed")/train.log"
      --candidate "$(seed_dir "$OUT/$model-lr${LR[$model]}" "$seed")/train.log")
  done
  dir="$OUT/time_to_target$([ "$model" = normformer ] || echo "-$model")"
  analyze time-to-target "${PAIRS[@]}" --metric mlm_ppl --labels "Pre-LN,${NAME[$model]}" --out-dir "$dir"
done
show_table "$OUT/lr_sweep.md"
show_table "$OUT/seeds.md"
show_table "$OUT/mlm_curves.md"
