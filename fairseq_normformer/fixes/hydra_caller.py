"""hydra 1.3 inspects every frame of the stack to read one (fix ``hydra_caller_frame``, fixes/__init__.py)."""
import inspect
import sys
from os.path import join

from hydra._internal import utils as hydra_utils


def calling_file_or_module(stack_depth: int) -> tuple:
    """hydra's ``detect_calling_file_or_module_from_stack_frame``, line for line, reading only the frame it returns
    (``sys._getframe``). hydra takes it from ``inspect.stack()``, which first looks up the source file, module and
    line of every frame of the stack: for a frame of no file (``<string>``, ``<frozen runpy>``: pytest-xdist's
    and ``python -m``'s) ``inspect.getmodule`` scans all of ``sys.modules`` (CPython issue 92041)."""
    frame = sys._getframe(stack_depth)  # hydra's stack[stack_depth]: 0 is this function, as there
    if hydra_utils.is_notebook() and "_dh" in frame.f_globals:
        return join(frame.f_globals["_dh"][0], "notebook.ipynb"), None
    calling_file = inspect.getsourcefile(frame) or inspect.getfile(frame)  # inspect.FrameInfo's filename
    calling_module = None
    try:
        calling_module = hydra_utils._get_module_name_override()
        if calling_module is None:
            calling_module = frame.f_globals[frame.f_code.co_name].__module__
    except KeyError:
        try:
            calling_module = frame.f_locals["self"].__module__
        except KeyError:
            pass
    return calling_file, calling_module
