"""Experiment runners that drive fairseq's CLIs: the LR stability sweep (Table 3)."""
