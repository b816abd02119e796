"""Speed and memory of NormFormer against the baselines (issue #4). A benchmark, not a test.

    python -m benchmarks measure                  # CPU: 6 layers, 512 dim, sequence 256, batch 8
    python -m benchmarks measure --device cuda    # GPU: the 125M (GPT-3 Small) preset, sequence 2048,
                                                  # plus the fused Triton kernels and LN kernel timings
    python -m benchmarks hf-generate              # greedy generate() of the HF exports against GPT-2
                                                  # (hf_generate.py; batch 1, one thread)
    python -m benchmarks paper-125m               # the paper's 125M, NormFormer and Pre-LN, trained by fairseq-train
                                                  # at 2048 tokens in bf16 (paper_125m.py; issue 42)
    python -m benchmarks norm-schemes             # each normalization scheme and the fused FFN LN against Pre-LN
                                                  # at the recipes' small shape (norm_schemes.py; issue 41)
    python -m benchmarks render                   # docs/benchmarks.md again from the stored JSON

variants.py declares the models, measure.py and eval_lm.py measure them into a JSON results file
(docs/results/benchmarks/DEVICE.json), formulas.py holds the FLOPs and memory formulas, report.py
turns a results file into its section of docs/benchmarks.md and judges targets.json.
"""
