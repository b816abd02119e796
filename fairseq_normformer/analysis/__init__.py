"""Offline analysis of finished runs: gradient-norm curves and ratios (Figs. 3, 5), learned γ
(Fig. 4), time-to-target (Fig. 2), fairseq log reading, the paper's tables and statistics over seeds
(seeds.py). Nothing here runs during training (that is instrumentation/); plotting (matplotlib) is
imported only by plots.py."""
