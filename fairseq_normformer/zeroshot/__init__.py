"""Zero-shot multiple-choice evaluation of fairseq checkpoints (the paper's Table 1).

- ``scorer``: log-likelihoods of continuations under a checkpoint (SentencePiece + fairseq dictionary)
- ``tasks``: HellaSwag, PIQA, WinoGrande, StoryCloze, OpenBookQA files -> GPT-3 prompts
- ``evaluate``: normalizations and accuracy
- ``table``: the paper's Table 1 in markdown
- ``stdlib_tasks``: small files in the five formats made from real text
- ``lm_eval_adapter``: the ``normformer`` model for EleutherAI's lm-evaluation-harness

See docs/zero_shot.md; the command line is ``normformer-zero-shot``.
"""
