"""fairseq's ``BufferedIterator`` loads batches ahead (``--data-buffer-size``, 10 by default) in a daemon
thread, ``BackgroundConsumer``. A run that stops before its epoch ends (``--max-update``,
``--stop-time-hours``, a validation-only pass) leaves that thread loading the next batches, in torch's
C++ code, when Python exits. CPython ends daemon threads during finalization with ``pthread_exit``,
whose unwinding through C++ frames calls ``std::terminate``: the process aborts ("terminate called
without an active exception", exit code 134) after it has saved everything. It happens now and then,
more often under load. Here each consumer stops at its next hand-over, and the ones still running are
stopped and joined at exit, before finalization."""
import atexit
import queue
import threading
import weakref

import torch
from fairseq.data import iterators

_running = weakref.WeakSet()
HAND_OVER_POLL_SECONDS = 0.1  # how often a consumer waiting for room in its queue checks for a stop
JOIN_TIMEOUT_SECONDS = 60  # at most this long for the batch being loaded at exit


def run(self):
    """``BackgroundConsumer.run``: fairseq's loop, with hand-overs that give up once ``stop`` is set."""
    self.stop = threading.Event()
    _running.add(self)
    if self.cuda_device is not None:  # as fairseq: avoids a CUDA context on GPU 0 when pinning memory
        torch.cuda.set_device(self.cuda_device)
    try:
        for item in self._source:
            if not _hand_over(self, item):
                return
            self.count += 1
            if self._max_len is not None and self.count >= self._max_len:
                break
        _hand_over(self, iterators._sentinel)
    except Exception as e:
        _hand_over(self, e)


def _hand_over(consumer, item) -> bool:
    """Put ``item`` in the consumer's queue; False if it was stopped while waiting for room."""
    while not consumer.stop.is_set():
        try:
            consumer._queue.put(item, timeout=HAND_OVER_POLL_SECONDS)
            return True
        except queue.Full:
            pass
    return False


def stop_running_consumers():
    """Stop every consumer still loading batches and wait for it to finish the batch in hand."""
    consumers = [c for c in list(_running) if c.is_alive()]
    for consumer in consumers:
        consumer.stop.set()
    for consumer in consumers:
        consumer.join(JOIN_TIMEOUT_SECONDS)


def install():
    """Registered at exit once; atexit functions run after the main thread ends, before finalization."""
    atexit.register(stop_running_consumers)
