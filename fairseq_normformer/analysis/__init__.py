"""Offline analysis of finished runs: gradient-norm curves and ratios (Figs. 3, 5), learned γ
(Fig. 4), time-to-target (Fig. 2), fairseq log reading and the paper's tables. Nothing here runs
during training (that is instrumentation/); plotting (matplotlib) is imported only by plots.py."""
