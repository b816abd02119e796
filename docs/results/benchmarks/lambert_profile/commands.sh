# The profile quoted in docs/benchmarks.md ("Where the time goes"), on the benchmark's corpus
# (python -m benchmarks lambert --workdir /tmp/lambert2work/bench builds it), one thread, 2026-11-23,
# on the shared 2-core machine at load ~8: per-op times are wall times and follow the load, counts are exact.
OMP_NUM_THREADS=1 PYTHONPATH=$PWD python docs/results/benchmarks/lambert_profile/profile_step.py \
    /tmp/lambert2work/bench/corpus_bert/data-bin 8 2 > docs/results/benchmarks/lambert_profile/profile.txt
