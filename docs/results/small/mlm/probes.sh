# Probe runs of 2026-11-26 that chose the sweep's LR range and length (not run by recipes/mlm_small.sh; stopped by
# hand once they had answered; their logs' validations are quoted in README.md). From the repository root, after
# `normformer-build-corpus --out work/recipes/corpus-pydocs-bert-v2000 --format bert --python-docs --vocab-size 2000`.
export OMP_NUM_THREADS=1
unset MKL_NUM_THREADS
probe() {  # ARCH LR NAME [EXTRA FLAGS]: the sweep's model and batch, a 1500-update schedule with 100 warmup updates
  .venv/bin/fairseq-train work/recipes/corpus-pydocs-bert-v2000/data-bin --user-dir fairseq_normformer --task mlm_nsp \
    --criterion mlm_nsp --tokens-per-sample 128 --arch "$1" --no-layernorm-embedding --encoder-layers 4 --encoder-embed-dim 256 \
    --encoder-ffn-embed-dim 1024 --encoder-attention-heads 4 --dropout 0.1 --attention-dropout 0.1 --optimizer adam \
    --adam-betas "(0.9, 0.98)" --adam-eps 1e-06 --weight-decay 0.01 --clip-norm 1.0 --lr-scheduler polynomial_decay \
    --lr "$2" --warmup-updates 100 --total-num-update 1500 --max-update 1500 --batch-size 32 --validate-interval-updates 100 \
    --no-save --save-dir "work/probe/$3" --seed 1 --required-batch-size-multiple 1 --num-workers 0 --log-format simple \
    --log-interval 25 --cpu --validate-interval 1000 "${@:4}" > "work/probe/$3.log" 2>&1
}
probe preln_bert_base 2e-3 preln_bert_base          # stopped after update 900
probe preln_bert_base 1e-3 preln1e-3                # stopped after update 400
probe preln_bert_base 5e-4 preln5e-4                # stopped after update 400
probe normformer_bert_base 4e-3 nf4e-3              # stopped after update 300
probe preln_roberta_base 2e-3 roberta_nonsp --no-nsp   # MLM only; stopped after update 200
