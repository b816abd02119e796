#!/usr/bin/env bash
# Span masking audit: the tiny test corpus (200k characters of stdlib docstrings, 1000 pieces),
# train split, --seed 1, epoch 1, every example. "before" is data/masking.py at commit 090b66b.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-/work/main/.venv/bin/python}
WORK=${WORK:-/tmp/span_masking_audit}
PYTHONPATH=$PWD $PY -c "from fairseq_normformer.corpus.stdlib import build_corpus; \
build_corpus('$WORK/tiny_bert', fmt='bert', vocab_size=1000, max_chars=200_000)"
git show 090b66b:fairseq_normformer/data/masking.py > "$WORK/old_masking.py"
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD $PY docs/results/span_masking_audit/audit.py "$WORK/tiny_bert/data-bin" \
    "$WORK/old_masking.py" | tee docs/results/span_masking_audit/table.md
# Span lengths (issue 30): "before" is data/masking.py at commit f7b601c (A and B masked with separate budgets)
git show f7b601c:fairseq_normformer/data/masking.py > "$WORK/per_segment_masking.py"
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD $PY docs/results/span_masking_audit/lengths.py "$WORK/tiny_bert/data-bin" \
    "$WORK/per_segment_masking.py" | tee docs/results/span_masking_audit/lengths.md
