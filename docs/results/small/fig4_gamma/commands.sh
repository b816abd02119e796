export OMP_NUM_THREADS=1
unset MKL_NUM_THREADS
.venv/bin/normformer-build-corpus --out work/recipes/corpus-pydocs-v2000 --python-docs --vocab-size 2000 
.venv/bin/normformer-analyze gamma work/recipes/lm-pair-small/normformer/checkpoints/checkpoint_last.pt --title NormFormer\ \(small\ scale\) --out-dir work/recipes/fig4_gamma-small 
