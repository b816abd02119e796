"""fairseq_normformer/runs/torchrun.py's exit-barrier filter, on torch's own exit barrier. After a
finished run the agent of node 1 may find node 0's agent, which hosts the store, gone (pytorch#69520):
torch then logs an error with its traceback. Here torch's barrier fails as it does then, on a store
whose other agent never comes (timeout after 1 s). The launchers' SIGTERM and exit-75 endings:
tests/distributed/test_save_on_signal.py."""
import logging
from datetime import timedelta
from types import SimpleNamespace

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.agent.server.api import SimpleElasticAgent, WorkerState

from fairseq_normformer.runs.torchrun import EXIT_BARRIER_ERROR, filter_exit_barrier_race

AGENT_LOGGER = "torch.distributed.elastic.agent.server.api"


def exit_barrier_records(caplog) -> list:
    """What torch's exit barrier of a succeeded worker group logs when the other agent is not there."""
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=5))
    group = SimpleNamespace(state=WorkerState.SUCCEEDED, group_world_size=2)
    agent = SimpleNamespace(_worker_group=group, _store=store, _exit_barrier_timeout=1, _in_exit_barrier=False)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=AGENT_LOGGER):
        SimpleElasticAgent._exit_barrier(agent)
    return caplog.records


@pytest.fixture
def race_filtered():
    race = filter_exit_barrier_race()
    yield
    logging.getLogger(AGENT_LOGGER).removeFilter(race)


def test_torch_logs_the_exit_barrier_error_with_its_traceback(caplog):
    errors = [r for r in exit_barrier_records(caplog) if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].getMessage().startswith(EXIT_BARRIER_ERROR) and errors[0].exc_info


def test_the_filter_drops_that_error_and_nothing_else(caplog, race_filtered):
    records = exit_barrier_records(caplog)
    assert [r.getMessage().split(".")[0] for r in records] == ["Local worker group finished (WorkerState"]
