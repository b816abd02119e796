"""The corpus builders' fairseq-preprocess (``sys.executable -m fairseq_cli.preprocess``) forked from the fork server
(tests/distributed/fork_server.py): a real process without torch's and fairseq's start-up. In the slow tests only:
``make test-fast`` builds one or two corpora, fewer than a server's start-up (~8 s of CPU) would pay for."""
import pytest

from ..distributed.fairseq_runs import RUN_ENV, forked_subprocesses


@pytest.fixture(autouse=True)
def forked_preprocess(request):
    if request.node.get_closest_marker("slow") is None:
        yield
        return
    with forked_subprocesses(**RUN_ENV):
        yield
