"""Evaluation metrics of the fine-tuning tasks: SQuAD's EM/F1 (squad.py) and entity-level
precision/recall/F1 of tagged chunks with conlleval's semantics (conll.py)."""
