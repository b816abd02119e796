export OMP_NUM_THREADS=1
unset MKL_NUM_THREADS
.venv/bin/normformer-build-corpus --out work/recipes/corpus-lm-v2000 --vocab-size 2000 
.venv/bin/normformer-analyze grad-curves --run Baseline=work/recipes/lm-pair-tiny/baseline/grad_norms.jsonl --run NormFormer=work/recipes/lm-pair-tiny/normformer/grad_norms.jsonl --param fc2.weight --updates 1:200 --out-dir docs/results/fig3_grad_norms 
