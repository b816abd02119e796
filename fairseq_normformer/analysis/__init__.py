"""Measurements of the paper: gradient norms (Figs. 3, 5), learned γ (Fig. 4), the LR stability
test (Table 3) and time-to-target (Fig. 2). Importing it registers the ``*_analysis`` tasks;
plotting (matplotlib) is imported only by the modules that plot."""
from . import tasks  # noqa: F401
