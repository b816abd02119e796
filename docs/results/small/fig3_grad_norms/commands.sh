export OMP_NUM_THREADS=1
unset MKL_NUM_THREADS
.venv/bin/normformer-build-corpus --out work/recipes/corpus-pydocs-v2000 --python-docs --vocab-size 2000 
.venv/bin/normformer-analyze grad-curves --run Baseline=work/recipes/lm-pair-small/baseline/grad_norms.jsonl --run Baseline=work/recipes/lm-pair-small/baseline/seed2/grad_norms.jsonl --run Baseline=work/recipes/lm-pair-small/baseline/seed3/grad_norms.jsonl --run NormFormer=work/recipes/lm-pair-small/normformer/grad_norms.jsonl --run NormFormer=work/recipes/lm-pair-small/normformer/seed2/grad_norms.jsonl --run NormFormer=work/recipes/lm-pair-small/normformer/seed3/grad_norms.jsonl --param fc2.weight --updates 1:200 --table-window 151:200 --out-dir work/recipes/fig3_grad_norms-small 
