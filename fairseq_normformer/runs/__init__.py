"""Running experiments through fairseq's CLIs: the run-directory convention (run_dir.py: done
marker, commands log, DRY_RUN), atomic directories (atomic.py), the LR stability sweep (Table 3) and
the launch scripts' arguments and arithmetic (launch.py, examples/slurm/) and their torchrun, which
ends a preempted or finished run without torch's tracebacks (torchrun.py)."""
