export OMP_NUM_THREADS=1
unset MKL_NUM_THREADS
.venv/bin/normformer-build-corpus --out work/recipes/corpus-pydocs-v2000 --python-docs --vocab-size 2000 
.venv/bin/normformer-analyze grad-ratio --baseline Baseline=work/recipes/lm-pair-small/baseline/grad_norms.jsonl --run NormFormer=work/recipes/lm-pair-small/normformer/grad_norms.jsonl --baseline Baseline=work/recipes/lm-pair-small/baseline/seed2/grad_norms.jsonl --run NormFormer=work/recipes/lm-pair-small/normformer/seed2/grad_norms.jsonl --baseline Baseline=work/recipes/lm-pair-small/baseline/seed3/grad_norms.jsonl --run NormFormer=work/recipes/lm-pair-small/normformer/seed3/grad_norms.jsonl --window 1:200 --out-dir work/recipes/fig5_grad_ratio-small 
