export OMP_NUM_THREADS=1
unset MKL_NUM_THREADS
.venv/bin/normformer-build-corpus --out work/recipes/corpus-lm-v2000 --vocab-size 2000 
.venv/bin/normformer-analyze grad-ratio --baseline Baseline=work/recipes/lm-pair-tiny/baseline/grad_norms.jsonl --run NormFormer=work/recipes/lm-pair-tiny/normformer/grad_norms.jsonl --window 1:200 --out-dir docs/results/fig5_grad_ratio 
