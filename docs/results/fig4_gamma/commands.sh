export OMP_NUM_THREADS=1
unset MKL_NUM_THREADS
.venv/bin/normformer-build-corpus --out work/recipes/corpus-lm-v2000 --vocab-size 2000 
.venv/bin/normformer-analyze gamma work/recipes/lm-pair-tiny/normformer/checkpoints/checkpoint_last.pt --title NormFormer\ \(tiny\ scale\) --out-dir docs/results/fig4_gamma 
