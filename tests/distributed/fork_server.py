"""Console scripts (fairseq-train) as real processes without the start-up of torch, torch._dynamo and fairseq, ~6.5 s
of CPU each and most of a tiny run's cost: a server imports them once and forks each run from itself, as
multiprocessing's forkserver does. A run is still a process of its own: its pid, stdin, stdout, stderr, environment,
working directory, ``__main__`` (the console script, run as the interpreter runs it: ``sys.exit(cli_main())``),
signal handlers, threads, atexit handlers and exit status. The plugin is imported by the run (--user-dir), as in a
new fairseq-train. What the server's imports print (a warning) is an error of every run started through it.

Run as a script, this file is the server: ``python -P fork_server.py FD``, FD its end of a SOCK_SEQPACKET socket."""
import os
import pickle
import socket
import subprocess
import sys
import tempfile

# in the console script's order: fairseq_cli.train sets the log's stream (stdout) before it imports fairseq, whose
# import would set stderr; torch._dynamo is imported by the first optimizer
PRELOAD = ("fairseq_cli.train", "torch._dynamo")
IGNORED = {"PYTEST_CURRENT_TEST"}  # environment a run may differ in from the server's: read by no import
FORKED_CPU_SECONDS = [0.0]  # of the runs that ended, their waited-for processes' included (tests/cpu_time.py)


class ForkServer:
    """The client: ``run(cmd, env, cwd, timeout)`` as ``subprocess.run(cmd, env=env, cwd=cwd, timeout=timeout,
    capture_output=True, text=True)``, for ``env`` equal to the server's but for IGNORED."""

    def __init__(self, env: dict):
        self.env = env
        self.socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.imports = tempfile.TemporaryFile()  # what the server's imports print
        self.server = subprocess.Popen([sys.executable, "-P", __file__, str(theirs.fileno())], env=env,
                                       pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=self.imports,
                                       stderr=subprocess.STDOUT)  # fmt: skip
        theirs.close()
        assert self.socket.recv(16) == b"ready", "the fork server's imports failed"
        self.imports.seek(0)
        printed = self.imports.read().decode()
        assert not printed, f"importing {', '.join(PRELOAD)} printed (as every fairseq-train would):\n{printed}"

    def serves(self, env: dict) -> bool:
        return self.server.poll() is None and all(env.get(k) == self.env.get(k) for k in {*env, *self.env} - IGNORED)

    def run(self, cmd: list, env: dict, cwd, timeout: float) -> subprocess.CompletedProcess:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, open(os.devnull) as null:
            request = pickle.dumps(([str(c) for c in cmd], env, str(cwd or os.getcwd())))
            socket.send_fds(self.socket, [request], [null.fileno(), out.fileno(), err.fileno()])
            pid = int(self.socket.recv(16))
            self.socket.settimeout(timeout)
            try:
                status = self.ended()
            except TimeoutError:
                os.kill(pid, 9)
                self.socket.settimeout(None)
                self.ended()
                raise subprocess.TimeoutExpired(cmd, timeout)
            finally:
                self.socket.settimeout(None)
            out.seek(0), err.seek(0)
            return subprocess.CompletedProcess(cmd, status, out.read().decode(), err.read().decode())

    def ended(self) -> int:
        """The exit status the server reports for the run; its CPU seconds counted."""
        status, seconds = self.socket.recv(64).split()
        FORKED_CPU_SECONDS[0] += float(seconds)
        return int(status)

    def close(self):
        self.socket.close()  # the server reads the end of its socket and exits
        self.server.wait()


def serve(ours: socket.socket) -> None:
    """Fork a process for each request until the client closes its end; report each one's pid and exit status."""
    while True:
        request, fds, _, _ = socket.recv_fds(ours, 1 << 20, 3)
        if not request:
            return
        pid = os.fork()
        if pid == 0:
            ours.close()
            run_console_script(*pickle.loads(request), fds)
        for fd in fds:
            os.close(fd)
        ours.send(b"%d" % pid)
        _, status, usage = os.wait4(pid, 0)
        ours.send(b"%d %f" % (os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime))


def run_console_script(cmd: list, env: dict, cwd: str, fds: list) -> None:
    """In the forked process: the console script ``cmd[0]`` run as ``python SCRIPT ARGS`` runs it, ``__main__`` and
    ``sys.path[0]`` included; its ``sys.exit`` ends this process as the interpreter ends one."""
    import runpy

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv, sys.orig_argv = cmd, [sys.executable, *cmd]
    sys.path.insert(0, os.path.dirname(cmd[0]))
    runpy.run_path(cmd[0], run_name="__main__")


if __name__ == "__main__":
    for module in PRELOAD:
        __import__(module)
    server_end = socket.socket(fileno=int(sys.argv[1]))
    server_end.send(b"ready")
    serve(server_end)
