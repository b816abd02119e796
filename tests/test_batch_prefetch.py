"""fixes/batch_prefetch.py: a process that stops reading its batches early exits cleanly, with fairseq's
loading thread stopped and joined at exit (fairseq's own thread aborts such a process now and then:
'terminate called without an active exception', exit code 134)."""
import subprocess
import sys

import pytest
import torch
from fairseq.data.iterators import BufferedIterator

from fairseq_normformer.fixes import batch_prefetch

# Reads one batch of an endless source whose batches are made by torch (as collating is) and exits: the
# loading thread is then in torch's C++ code when Python ends it, unless the fix stopped it first.
STOPS_EARLY = """
import sys, torch
if sys.argv[1] == "plugin":
    import fairseq_normformer  # applies the fixes
from fairseq.data.iterators import BufferedIterator

class Batches:
    def __len__(self):
        return 10**9

    def __iter__(self):
        while True:
            yield torch.cat([torch.randn(300, 300)] * 20).sum()

next(BufferedIterator(1000, Batches()))
"""


def stop_early(fixed: bool) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", STOPS_EARLY, "plugin" if fixed else "fairseq"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env={"OMP_NUM_THREADS": "1"})


@pytest.mark.slow
def test_a_process_that_stops_reading_batches_early_exits_cleanly():
    for _ in range(2):
        run = stop_early(fixed=True)
        assert run.returncode == 0 and "terminate called" not in run.stderr, run.stderr[-2000:]
    # fairseq's own loading thread: the same program aborts (almost always: 10 of 10 here; up to three tries)
    aborted = (stop_early(fixed=False) for _ in range(3))
    assert any(r.returncode == -6 and "terminate called without an active exception" in r.stderr for r in aborted)


def test_running_consumers_are_stopped_and_joined():
    produced = []

    class Counting:
        def __len__(self):
            return 10**9

        def __iter__(self):
            while True:
                produced.append(1)
                yield torch.zeros(1)

    batches = BufferedIterator(4, Counting())
    assert torch.equal(next(batches), torch.zeros(1))
    consumer = batches._consumer
    assert consumer.is_alive()  # it waits for room in the full queue
    batch_prefetch.stop_running_consumers()
    assert not consumer.is_alive()
    assert len(produced) <= 4 + 2  # the queue, the batch taken, the one in hand
