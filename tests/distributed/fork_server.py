"""Python programs (fairseq-train, fairseq-hydra-train, ``python -m torch.distributed.run``) as real processes without
the start-up of torch, torch._dynamo and fairseq, ~6.5 s of CPU each and most of a tiny run's cost: a server imports
them once and forks each run from itself, as multiprocessing's forkserver does. A run is still a process of its own:
its pid, stdin, stdout, stderr, environment, working directory, ``__main__`` (the program, run as the interpreter runs
it), signal handlers, threads, atexit handlers, children and exit status. The plugin is imported by the run
(--user-dir), as in a new fairseq-train. What the server's imports print (a warning) is an error of every run started
through it.

Run as a script, this file is the server: ``python -P fork_server.py FD``, FD its end of a SOCK_SEQPACKET socket."""
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import threading

# in the console script's order: fairseq_cli.train sets the log's stream (stdout) before it imports fairseq, whose
# import would set stderr (fairseq-hydra-train imports fairseq first, then hydra sets each job's log: the same for a
# forked run, test_hydra_train.py); torch._dynamo is imported by the first optimizer
PRELOAD = ("fairseq_cli.train", "torch._dynamo")
IGNORED = {"PYTEST_CURRENT_TEST"}  # environment a run may differ in from the server's: read by no import
FORKED_CPU_SECONDS = [0.0]  # of the runs that ended, their waited-for processes' included (tests/cpu_time.py)


class ForkServer:
    """The client: ``start`` as ``subprocess.Popen`` and ``run`` as ``subprocess.run`` (text, output captured) for a
    command ``program`` names and an environment equal to the server's but for IGNORED (``serves``)."""

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

    def start(self, cmd: list, env: dict, cwd=None, stdout=None, stderr=None) -> "ForkedProcess":
        """``subprocess.Popen(cmd, env=env, cwd=cwd, stdout=stdout, stderr=stderr, stdin=DEVNULL, text=True)``;
        stdout and stderr: a file, PIPE or (stderr) STDOUT."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # the run's pid, then its end
        pipes, fds, opened = {}, [], [theirs.fileno()]  # opened: closed here once the server holds them
        for name, target in (("stdout", stdout), ("stderr", stderr)):
            if target == subprocess.PIPE:
                read, fd = os.pipe()
                pipes[name] = open(read)
            elif target == subprocess.STDOUT:
                fd = fds[0]
            elif target is None:
                fd = os.open(os.devnull, os.O_WRONLY)
            else:
                fd = target.fileno()
            fds.append(fd)
            opened += [fd] if target == subprocess.PIPE or target is None else []
        with open(os.devnull) as null:
            request = pickle.dumps(([str(c) for c in cmd], env, str(cwd or os.getcwd())))
            socket.send_fds(self.socket, [request], [null.fileno(), *fds, theirs.fileno()])
        for fd in opened:
            os.close(fd)
        theirs.detach()
        return ForkedProcess(cmd, int(ours.recv(16)), ours, pipes.get("stdout"), pipes.get("stderr"))

    def run(self, cmd: list, env: dict, cwd, timeout: float) -> subprocess.CompletedProcess:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            process = self.start(cmd, env, cwd, out, err)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise
            out.seek(0), err.seek(0)
            return subprocess.CompletedProcess(cmd, process.returncode, out.read().decode(), err.read().decode())

    def close(self):
        self.socket.close()  # the server reads the end of its socket and exits
        self.server.wait()


class ForkedProcess:
    """``subprocess.Popen``'s interface (pid, stdout, stderr, returncode, poll, wait, communicate, send_signal,
    terminate, kill) to a run the server forked; its exit status as the server waited for it."""

    def __init__(self, args, pid: int, report: socket.socket, stdout, stderr):
        self.args, self.pid, self.report, self.stdout, self.stderr = args, pid, report, stdout, stderr
        self.returncode = None

    def poll(self):
        try:
            return self.wait(timeout=0)
        except subprocess.TimeoutExpired:
            return None

    def wait(self, timeout=None) -> int:
        if self.returncode is None:
            self.report.settimeout(timeout)
            try:
                self.ended(self.report.recv(64))
            except (TimeoutError, BlockingIOError):  # BlockingIOError: timeout 0
                self.report.settimeout(None)
                raise subprocess.TimeoutExpired(self.args, timeout) from None
        return self.returncode

    def ended(self, message: bytes) -> None:
        """The exit status the server reports for the run; its CPU seconds counted."""
        status, seconds = message.split()
        FORKED_CPU_SECONDS[0] += float(seconds)
        self.returncode = int(status)
        self.report.close()

    def communicate(self, timeout=None) -> tuple:
        """The rest of stdout and stderr (the pipes'; None for the others) once the run exited."""
        pipes = [pipe for pipe in (self.stdout, self.stderr) if pipe is not None]
        read = {}
        readers = [threading.Thread(target=lambda p=p: read.__setitem__(p, p.read()), daemon=True) for p in pipes]
        for reader in readers:
            reader.start()
        self.wait(timeout)
        for reader in readers:
            reader.join()
        return read.get(self.stdout), read.get(self.stderr)

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self):
        self.send_signal(15)

    def kill(self):
        self.send_signal(9)


def program(cmd: list):
    """(how, what) of the Python programs a server runs: ('script', PATH) for a console script or ``python [-P] PATH``
    ('safe-script' with -P), ('module', NAME) for ``python -m NAME``; None for any other command."""
    if cmd[0] != sys.executable:
        with open(cmd[0], "rb") as script:
            return ("script", cmd[0]) if b"python" in script.readline() else None
    if cmd[1:2] == ["-m"]:
        return "module", cmd[2]
    if cmd[1:2] == ["-P"]:
        return "safe-script", cmd[2]
    return ("script", cmd[1]) if not cmd[1].startswith("-") else None


def serve(ours: socket.socket) -> None:
    """Fork a process for each request until the client closes its end; a thread reports each one's pid and exit
    status on the run's own socket."""
    while True:
        request, fds, _, _ = socket.recv_fds(ours, 1 << 20, 5)
        if not request:
            return
        report = socket.socket(fileno=fds.pop())
        pid = os.fork()
        if pid == 0:
            ours.close(), report.close()
            run_program(*pickle.loads(request), fds)
            sys.exit(0)  # the program returned: the interpreter's end of a program that did not exit
        for fd in fds:
            os.close(fd)
        report.send(b"%d" % pid)
        threading.Thread(target=report_exit, args=(pid, report), daemon=True).start()


def report_exit(pid: int, report: socket.socket) -> None:
    _, status, usage = os.wait4(pid, 0)
    report.send(b"%d %f" % (os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime))
    report.close()


def run_program(cmd: list, env: dict, cwd: str, fds: list) -> None:
    """In the forked process: the program of ``cmd`` as the interpreter runs it, ``__main__``, ``sys.argv`` and
    ``sys.path[0]`` included; its ``sys.exit`` ends this process as the interpreter ends one."""
    import runpy

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    how, what = program(cmd)
    sys.orig_argv = cmd if cmd[0] == sys.executable else [sys.executable, *cmd]
    if how == "module":
        sys.argv = [what, *cmd[3:]]
        sys.path.insert(0, cwd)
        runpy.run_module(what, run_name="__main__", alter_sys=True)
    else:
        sys.argv = cmd[cmd.index(what):]
        if how == "script":
            sys.path.insert(0, os.path.dirname(os.path.abspath(what)))
        runpy.run_path(what, run_name="__main__")


if __name__ == "__main__":
    for module in PRELOAD:
        __import__(module)
    server_end = socket.socket(fileno=int(sys.argv[1]))
    server_end.send(b"ready")
    serve(server_end)
