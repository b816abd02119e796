#!/usr/bin/env bash
# The normalization bench (docs/results/small/norm_bench/): NormFormer's open questions, and the schemes that
# came after it, each measured on the causal LM as the paper's tables measure NormFormer.
#
#   recipes/norm_bench.sh [tiny|small] [OUT_DIR]     (see recipes/_lm_common.sh; default SEEDS=3)
#
# 1. Grid: every scheme of SCHEMES (Pre-LN, Post-LN, NormFormer, sandwich norm, QK-norm, RMSNorm, DyT, DeepNorm)
#    at three LRs of LADDER, one seed. While a scheme's best is the lowest or the highest LR it tried, the next
#    LR of the ladder is trained too, so that each grid brackets its best (OUT/grid/SCHEME.md,
#    normformer-analyze lr-grid). A run that diverges is marked so and not trained again.
# 2. Seeds: each scheme at its best LR, SEEDS times (the grid's run is seed 1): OUT/schemes.md (final validation
#    perplexity, each scheme's difference to Pre-LN as a 95% interval paired by seed; OUT/schemes_curves.png, its
#    validation perplexity against updates) and
#    OUT/time_to_target/SCHEME/ (the fraction of Pre-LN's updates a scheme needs to reach Pre-LN's final perplexity).
# 3. Placement: NormFormer's operations in the first half of the layers only, the second half only, and all, at
#    NormFormer's best LR, SEEDS times: OUT/placement.md, OUT/placement_halves.md (the first half against the second,
#    paired by seed) and OUT/grad_norms/ (FC2's weight gradient per layer, Fig. 3's measure, over updates 151-200).
# 4. FFN norm: NormFormer with its FFN LN a LayerNorm, a LayerNorm without bias and an RMSNorm: OUT/ffn_norm.md.
# 5. Stability: the Table 3 test of each scheme at its shape (normformer-analyze lr-stability: warmup to PEAK_LR,
#    default 2.0, over WARMUP updates, default 1000; fp32, stops at the first activation above 65504), one seed:
#    OUT/stability.md.
# Every training run records gradient norms every 5 updates (grad_norms.jsonl). The parts run in this order;
# finished runs are reused (recipes/_run_dir.sh), so a second call only adds what the first did not finish.
SCALES="tiny small" SEEDS="${SEEDS:-3}"
source "$(dirname "$0")/_lm_common.sh"
small_baseline_common 5
LADDER=(1e-4 3e-4 1e-3 3e-3 6e-3 1e-2 2e-2 4e-2)
NORMFORMER=(--scale-attn --scale-fc --scale-heads)
# name|label|flags|the first three LRs (Pre-LN's and NormFormer's: around their best in recipes/table7_hparams.sh)
SCHEMES=(
  "preln|Pre-LN||1e-3 3e-3 6e-3"
  "postln|Post-LN|--post-ln|3e-4 1e-3 3e-3"
  "normformer|NormFormer|${NORMFORMER[*]}|3e-3 6e-3 1e-2"
  "sandwich|Sandwich norm|--sandwich-norm|3e-3 6e-3 1e-2"
  "qknorm|QK-norm|--qk-norm|1e-3 3e-3 6e-3"
  "rmsnorm|RMSNorm|--norm-type rmsnorm|1e-3 3e-3 6e-3"
  "dyt|DyT|--norm-type dyt|1e-3 3e-3 6e-3"
  "deepnorm|DeepNorm|--post-ln --deepnorm|3e-4 1e-3 3e-3"
)
declare -A LABEL FLAGS TRIED BEST
NAMES=()
for row in "${SCHEMES[@]}"; do
  IFS="|" read -r name label flags lrs <<<"$row"
  NAMES+=("$name") LABEL[$name]="$label" FLAGS[$name]="$flags" TRIED[$name]="$lrs"
done
HALF=$((${CPU_MODEL[3]} / 2))  # CPU_MODEL: --arch normformer_lm --decoder-layers N ...

# bench_run DIR SEED FLAGS...: one training run into DIR with its gradient norms; a diverged run is not redone
bench_run() {
  local dir="$1" seed="$2"
  shift 2
  if [ -e "$dir/diverged" ]; then log "$(basename "$dir"): diverged before, not trained again"; return; fi
  train "$dir" "${COMMON[@]}" "$@" --grad-norm-interval 5 --grad-norm-file "$dir/grad_norms.jsonl" --seed "$seed"
}
grid_dir() { echo "$OUT/grid/$1-lr$2"; }  # grid_dir SCHEME LR: seed 1's run, seed K's in its seedK

# wait_grid: wait for the runs; one that stopped on a numerical failure is marked diverged, any other failure stops
wait_grid() {
  wait_runs && return
  local name lr dir
  for name in "${NAMES[@]}"; do
    for lr in ${TRIED[$name]}; do
      dir="$(grid_dir "$name" "$lr")"
      if is_done "$dir" || [ -e "$dir/diverged" ]; then continue; fi
      if [ "$(analyze outcome "$dir/train.log")" = diverged ]; then touch "$dir/diverged"; else exit 1; fi
    done
  done
}

# extend_grid NAME: BEST[NAME] from the grid so far; adds the next LR of the ladder when the best is at an edge
# (returns 1 when it added none)
extend_grid() {
  local name="$1" lr runs=() position widened
  if [ "$DRY_RUN" = 1 ]; then read -ra runs <<<"${TRIED[$name]}" && BEST[$name]="${runs[1]}" && return 1; fi
  for lr in ${TRIED[$name]}; do runs+=(--run "$lr=$(grid_dir "$name" "$lr")/train.log"); done
  read -r BEST[$name] position < <(analyze lr-grid "${runs[@]}" --out "$OUT/grid/$name.md" \
    --title "${LABEL[$name]}, $SCALE scale: final validation perplexity by LR (seed 1, ${UPDATES:-300} updates)")
  if [ -z "${BEST[$name]}" ]; then exit 1; fi  # lr-grid said why
  widened="$(widen_grid "${TRIED[$name]}" "$position" "${LADDER[@]}")"
  [ -n "$widened" ] && TRIED[$name]="$widened"
}

# 1. the grid, extended until every scheme's best is inside it
# (breadth first: every scheme's middle LR, then every scheme's lowest, then highest; a run cut short leaves
# each scheme as far along as the others)
pending=("${NAMES[@]}")
while ((${#pending[@]})); do
  for position in 1 0 2 3 4 5 6 7; do  # (a grid is at most the 8 LRs of LADDER)
    for name in "${pending[@]}"; do
      read -ra lrs <<<"${TRIED[$name]}"
      # shellcheck disable=SC2086  # FLAGS is a list of switches
      if ((position < ${#lrs[@]})); then bench_run "$(grid_dir "$name" "${lrs[$position]}")" 1 ${FLAGS[$name]} --lr "${lrs[$position]}"; fi
    done
  done
  wait_grid
  extended=()
  for name in "${pending[@]}"; do if extend_grid "$name"; then extended+=("$name"); fi; done
  pending=("${extended[@]}")
done

# seeds_of NAME DIR FLAGS...: SEEDS runs (seed 1 in DIR), into TABLE_RUNS as NAME's rows
seeds_of() {
  local label="$1" dir="$2" seed
  shift 2
  for seed in $(seq "$SEEDS"); do bench_run "$(seed_dir "$dir" "$seed")" "$seed" "$@"; done
  seed_runs "$label" "$dir" train.log
}

# 2. every scheme at its best LR
TABLE_RUNS=()
for name in "${NAMES[@]}"; do
  # shellcheck disable=SC2086
  seeds_of "${LABEL[$name]} (lr ${BEST[$name]})" "$(grid_dir "$name" "${BEST[$name]}")" ${FLAGS[$name]} --lr "${BEST[$name]}"
done
wait_runs
analyze ppl-table "${TABLE_RUNS[@]}" --out "$OUT/schemes.md" --plot "$OUT/schemes_curves.png" \
  --title "Normalization schemes, $SCALE scale: final validation perplexity, each at its best LR, $SEEDS seeds"
for name in "${NAMES[@]:1}"; do
  PAIRS=()
  for seed in $(seq "$SEEDS"); do
    PAIRS+=(--baseline "$(seed_dir "$(grid_dir preln "${BEST[preln]}")" "$seed")/train.log"
      --candidate "$(seed_dir "$(grid_dir "$name" "${BEST[$name]}")" "$seed")/train.log")
  done
  analyze time-to-target "${PAIRS[@]}" --labels "Pre-LN,${LABEL[$name]}" --out-dir "$OUT/time_to_target/$name"
done

# 3. placement: NormFormer's operations in some layers
NF_LR="${BEST[normformer]}"
TABLE_RUNS=() GRAD_RUNS=()
seed_runs "Pre-LN (lr ${BEST[preln]})" "$(grid_dir preln "${BEST[preln]}")" train.log
seed_runs "NormFormer, all layers" "$(grid_dir normformer "$NF_LR")" train.log
FIRST_HALF="NormFormer, first half (layers 0-$((HALF - 1)))" SECOND_HALF="NormFormer, second half"
seeds_of "$FIRST_HALF" "$OUT/placement/first-half" "${NORMFORMER[@]}" --normformer-layers "first:$HALF" --lr "$NF_LR"
seeds_of "$SECOND_HALF" "$OUT/placement/second-half" "${NORMFORMER[@]}" --normformer-layers "last:$HALF" --lr "$NF_LR"
wait_runs
analyze ppl-table "${TABLE_RUNS[@]}" --compare-to "NormFormer, all layers" --out "$OUT/placement.md" \
  --title "NormFormer's operations in some layers, $SCALE scale, lr $NF_LR, $SEEDS seeds"
for run in "${TABLE_RUNS[@]}"; do GRAD_RUNS+=("${run/%train.log/grad_norms.jsonl}"); done
analyze grad-curves "${GRAD_RUNS[@]}" --param fc2.weight --updates 1:200 --table-window 151:200 --out-dir "$OUT/grad_norms"
TABLE_RUNS=()  # the two halves against each other
seed_runs "$SECOND_HALF" "$OUT/placement/second-half" train.log
seed_runs "$FIRST_HALF" "$OUT/placement/first-half" train.log
analyze ppl-table "${TABLE_RUNS[@]}" --out "$OUT/placement_halves.md" \
  --title "NormFormer's operations in the first half of the layers against the second half, paired by seed"

# 4. the kind of the FFN LN
TABLE_RUNS=()
seed_runs "NormFormer, FFN LN a LayerNorm" "$(grid_dir normformer "$NF_LR")" train.log
for kind in layernorm_nobias rmsnorm; do
  seeds_of "NormFormer, FFN LN $kind" "$OUT/ffn_norm/$kind" "${NORMFORMER[@]}" --ffn-norm-type "$kind" --lr "$NF_LR"
done
wait_runs
analyze ppl-table "${TABLE_RUNS[@]}" --out "$OUT/ffn_norm.md" \
  --title "The kind of NormFormer's FFN LN, $SCALE scale, lr $NF_LR, $SEEDS seeds"

# 5. the LR stability test, one seed
STABILITY=(--sample-break-mode none --tokens-per-sample 128 --batch-size 16 "${PAPER_OPTIMIZER[@]}" --dropout 0.1
  --attention-dropout 0.1 --cpu --num-workers 0 --disable-validation --no-save --seed 1 "${CPU_MODEL[@]}")
TABLE_RUNS=()
for name in "${NAMES[@]}"; do
  dir="$OUT/stability/$name"
  if ! is_done "$dir"; then
    # shellcheck disable=SC2086
    analyze lr-stability "${COMMON[0]}" --peak-lr "${PEAK_LR:-2.0}" --warmup-updates "${WARMUP:-1000}" --out-dir "$dir" \
      -- "${STABILITY[@]}" ${FLAGS[$name]}
  fi
  TABLE_RUNS+=(--run "${LABEL[$name]}=$dir")
done
analyze lr-table "${TABLE_RUNS[@]}" --out "$OUT/stability.md"
show_table "$OUT/schemes.md"
