# The study's runs, from the repository root (paths relative to it). The recipe restores the archived runs of this
# page's runs/ (corpus id 3b4e9538a817: the Python 3.11 manual of Debian's python3.11-doc 3.11.2-6+deb12u8), then
# trains what is missing: 11 schemes x 12 LRs x 3 widths at seed 1, then seeds 2 and 3 at each scheme's best LR of
# the 256 width. `DRY_RUN=1 recipes/lr_sensitivity.sh small` writes every command without training; the 128-wide
# Pre-LN run at 5e-3, for one (the second --validate-interval-updates, the study's one validation at the end,
# overrides that of _lm.yaml):
#   mkdir -p work/recipes/lr_sensitivity-small/w128/grid/preln-lr5e-3 && .venv/bin/fairseq-train
#     work/recipes/corpus-pydocs-v2000/data-bin --task language_modeling_analysis --sample-break-mode none
#     --tokens-per-sample 128 --batch-size 16 --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-08
#     --weight-decay 0.01 --clip-norm 0.0 --lr-scheduler polynomial_decay --warmup-updates 30 --total-num-update 300
#     --max-update 300 --dropout 0.1 --attention-dropout 0.1 --validate-interval-updates 30 --validate-interval 1000
#     --no-epoch-checkpoints --save-interval-updates 100000 --cpu --num-workers 0 --log-format json --log-interval 1
#     --arch normformer_lm --decoder-layers 4 --decoder-embed-dim 128 --decoder-ffn-embed-dim 512
#     --decoder-attention-heads 2 --share-decoder-input-output-embed --lr 5e-3 --diagnostics-interval 10
#     --diagnostics-file work/recipes/lr_sensitivity-small/w128/grid/preln-lr5e-3/diagnostics.jsonl
#     --validate-interval-updates 300 --seed 1 --user-dir fairseq_normformer --save-dir
#     work/recipes/lr_sensitivity-small/w128/grid/preln-lr5e-3/checkpoints >
#     work/recipes/lr_sensitivity-small/w128/grid/preln-lr5e-3/train.log 2>&1
RUNS_ARCHIVE=docs/results/small/lr_sensitivity/runs JOBS=2 recipes/lr_sensitivity.sh small
