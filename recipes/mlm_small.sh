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
case "${PRECISION:=bf16}" in
  fp32) PRECISION_FLAGS=() ;;
  bf16) PRECISION_FLAGS=(--bf16) ;;
  *) echo "PRECISION must be fp32 or bf16, got '$PRECISION'" >&2; exit 2 ;;
esac
read -ra EXTRA <<<"${EXTRA_FLAGS:-}"
read -ra MODELS <<<"${MODELS:-preln normformer}"
# each variable of the spec that is set here (LRS: every grid)
SETS=(precision="$PRECISION" ${PRELN_LRS:+preln_lrs="$PRELN_LRS"} ${NF_LRS:+nf_lrs="$NF_LRS"}
  ${SCHEME_LRS:+scheme_lrs="$SCHEME_LRS"} ${LRS:+preln_lrs="$LRS" nf_lrs="$LRS" scheme_lrs="$LRS"}
  ${BASE_LR:+base_lr="$BASE_LR"} ${NF_LR:+nf_lr="$NF_LR"})
sweep mlm_small --schemes "${MODELS[@]}" "${SETS[@]/#/--set=}" -- "${PRECISION_FLAGS[@]}" "${EXTRA[@]}"
show_table "$OUT/lr_sweep.md"
show_table "$OUT/seeds.md"
show_table "$OUT/mlm_curves.md"
