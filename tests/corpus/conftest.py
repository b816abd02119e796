"""The corpus builders' fairseq-preprocess (``sys.executable -m fairseq_cli.preprocess``) forked from the fork server
(tests/distributed/fork_server.py): a real process without torch's and fairseq's start-up."""
import pytest

from ..distributed.fairseq_runs import forked_subprocesses


@pytest.fixture(autouse=True)
def forked_preprocess():
    with forked_subprocesses(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1"):
        yield
