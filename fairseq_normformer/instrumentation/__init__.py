"""Training-time measurements, opt-in through the ``*_analysis`` tasks (tasks/analysis.py):
per-layer gradient norms (grad_norms.py), the activation-overflow monitor (activations.py), and
the parameter groups both name their records by (param_groups.py)."""
