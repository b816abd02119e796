"""Running experiments through fairseq's CLIs: the run-directory convention (run_dir.py: done
marker, commands log, DRY_RUN), atomic directories (atomic.py) and the LR stability sweep (Table 3)."""
