"""A pytest plugin, ``-p tests.cpu_time``: the CPU seconds each test used (its process's and its finished
subprocesses', setup and teardown included), the slowest listed at the end, like ``--durations`` but steady on
a machine busy with other work. ``make test PYTEST_ARGS="-p tests.cpu_time"``; CPU_TIME_TOP=N lists N (30);
CPU_TIME_FILE=F appends each test's line to F as it ends (tab-separated seconds and node id), so a run cut short
still says where its time went."""
import os
import resource
from collections import defaultdict

import pytest

from .distributed.fork_server import FORKED_CPU_SECONDS

PROPERTY = "cpu_seconds"


def cpu_seconds() -> float:
    """This process's, its waited-for subprocesses' and the runs forked for it (distributed/fork_server.py)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + FORKED_CPU_SECONDS[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from measured(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from measured(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from measured(item)


def measured(item):
    """A phase's CPU seconds, recorded on the item: its reports carry them (to pytest-xdist's controller too)."""
    start = cpu_seconds()
    yield
    item.user_properties.append((PROPERTY, cpu_seconds() - start))


TOTALS = defaultdict(float)


def pytest_runtest_logreport(report):
    if report.when == "teardown":  # its properties hold every phase's
        TOTALS[report.nodeid] = sum(v for k, v in report.user_properties if k == PROPERTY)
        if os.environ.get("CPU_TIME_FILE") and "PYTEST_XDIST_WORKER" not in os.environ:  # the controller writes
            with open(os.environ["CPU_TIME_FILE"], "a") as log:
                log.write(f"{TOTALS[report.nodeid]:.2f}\t{report.nodeid}\n")


def pytest_terminal_summary(terminalreporter):
    top = int(os.environ.get("CPU_TIME_TOP", 30))
    write = terminalreporter.write_line
    terminalreporter.section(f"CPU time: {sum(TOTALS.values()):.0f} s in {len(TOTALS)} tests; the {top} largest")
    for nodeid, seconds in sorted(TOTALS.items(), key=lambda kv: -kv[1])[:top]:
        write(f"{seconds:8.1f}s {nodeid}")
