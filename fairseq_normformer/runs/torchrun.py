"""torchrun that ends quietly: torch.distributed.run's main, unchanged but for three endings
(docs/distributed.md, "When a job is preempted"). Our launcher, not a fix: fairseq and torch are
untouched outside this process. examples/slurm/train_lm_torchrun.sh runs it as
    python -P fairseq_normformer/runs/torchrun.py TORCHRUN_ARGS   (or python -m fairseq_normformer.runs.torchrun)
- torchrun got a signal and forwarded it to its workers, which all exited 75 having saved
  checkpoint_last (fixes/save_on_signal.py): one line and exit 75, not torch's SignalException traceback;
- every failed worker exited 75 (a signal to another node stopped them): the same, not torch's
  ChildFailedError traceback and table;
- after this node's workers all succeeded, torch elastic's exit barrier failed because node 0's agent,
  which hosts the store, had already left (pytorch#69520): not logged (the filter below).
Any other ending keeps torch's traceback and report. Imports torch only (not the plugin, which would
import fairseq and apply its fixes in the launcher)."""
import logging
import signal
import sys

from torch.distributed import run as torch_run
from torch.distributed.elastic.agent.server import api as agent_api
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher import api as launcher_api

STOPPED = 75  # EX_TEMPFAIL: the workers saved checkpoint_last on a signal (fixes/save_on_signal.py EXIT_STATUS)
EXIT_BARRIER_ERROR = "Error waiting on exit barrier"  # agent_api.SimpleElasticAgent._exit_barrier's message


class ExitCodesAgent(LocalElasticAgent):
    """torch's agent; remembers its workers' exit codes when it shuts them down (on a signal)."""

    exit_codes: list = []

    def _shutdown(self, death_sig: signal.Signals = signal.SIGTERM, timeout: int = 30) -> None:
        super()._shutdown(death_sig, timeout)
        handlers = getattr(self._pcontext, "subprocess_handlers", None) or {}
        ExitCodesAgent.exit_codes = [handler.proc.returncode for handler in handlers.values()]


class ExitBarrierRace(logging.Filter):
    """Drops the exit-barrier error, which the agent logs only once its worker group has succeeded."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(EXIT_BARRIER_ERROR)


def stopped(cause: str) -> int:
    print(f"torchrun: the workers stopped on {cause} and saved checkpoint_last: run the same command to resume",
          file=sys.stderr, flush=True)  # fmt: skip
    return STOPPED


def filter_exit_barrier_race() -> ExitBarrierRace:
    race = ExitBarrierRace()
    agent_api.logger.addFilter(race)
    return race


def main(argv=None) -> int:
    launcher_api.LocalElasticAgent = ExitCodesAgent  # the class launch_agent instantiates
    filter_exit_barrier_race()
    try:
        torch_run.main(argv)
    except SignalException as signalled:
        if not ExitCodesAgent.exit_codes or set(ExitCodesAgent.exit_codes) != {STOPPED}:
            raise
        return stopped(signal.Signals(signalled.sigval).name)
    except ChildFailedError as failed:
        if {failure.exitcode for failure in failed.failures.values()} != {STOPPED}:
            raise
        return stopped("a signal to this or another node")
    return 0


if __name__ == "__main__":
    sys.exit(main())
