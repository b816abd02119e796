"""Python programs (fairseq-train, fairseq-hydra-train, ``python -m torch.distributed.run``) as real processes without
the start-up of torch, torch._dynamo and fairseq, ~6.5 s of CPU each and most of a tiny run's cost: a server imports
them once and forks each run from itself, as multiprocessing's forkserver does. A run is still a process of its own:
its pid, stdin, stdout, stderr, environment, working directory, ``__main__`` (the program, run as the interpreter runs
it), signal handlers, threads, atexit handlers, children and exit status. The plugin is imported by the run
(--user-dir), as in a new fairseq-train. What the server's imports print (a warning) is an error of every run started
through it. A forked torchrun forks its workers too (``fork_workers``), and a script or program given ``commands``
(python, torchrun and the console scripts on PATH: forked_command.py) has what it starts by name forked. What a forked
process cannot show is its environment in /proc (the server's): ``environment`` reads a forked torchrun worker's from
the record its launcher keeps while it runs.

Run as a script, this file is the server: ``python -P fork_server.py FD PATH``, FD its end of a SOCK_SEQPACKET socket
to the client, PATH the socket it listens on for commands."""
import atexit
import gc
import json
import logging
import os
import pickle
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# in the console script's order: fairseq_cli.train sets the log's stream (stdout) before it imports fairseq, whose
# import would set stderr (fairseq-hydra-train imports fairseq first, then hydra sets each job's log: the same for a
# forked run, test_hydra_train.py); torch._dynamo is imported by the first optimizer
PRELOAD = ("fairseq_cli.train", "torch._dynamo")
FORKED_CPU_SECONDS = [0.0]  # of the runs that ended, their waited-for processes' included (tests/cpu_time.py)
# torch's module and console script, ours (runs/torchrun.py) as a script and as a module
TORCHRUNS = {"torch.distributed.run", "torchrun", "torchrun.py", "fairseq_normformer.runs.torchrun"}
# what torch's agent adds to a worker's environment (LocalElasticAgent._start_workers): read by no import
WORKER_ENVIRONMENT = {"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
                      "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                      "TORCH_NCCL_ASYNC_ERROR_HANDLING"}  # and TORCHELASTIC_*
ENVIRONMENTS = Path(tempfile.gettempdir(), f"forked-environments-{os.getuid()}")  # {pid}-{start time}.json
FAIRSEQ_LOGGING_TO_STDOUT = {"train", "eval_lm", "interactive", "preprocess", "validate", "hydra_validate"}  # fairseq_cli.X
PYTHON = sys.executable  # of the server's environment
COMMAND = b"# a command of fork_server.py"  # the second line of each of ``commands``
IMPORT_TIME = re.compile(r"PYTHON(?!PATH$)|OMP_|MKL_|KMP_|GOMP_|OPENBLAS_|ATEN_|ONEDNN_|DNNL_|PYTORCH_|TORCH_(?!NCCL_ASYNC)|"
                         r"TORCHDYNAMO|TORCHINDUCTOR|CUDA|NCCL_|LD_|HF_|TRANSFORMERS_|TOKENIZERS_|LOGLEVEL$|LANG$|LC_|TMPDIR$")


class ForkServer:
    """The client: ``start`` as ``subprocess.Popen`` and ``run`` as ``subprocess.run`` (text, output captured) for a
    command ``program`` names and an environment whose ``import_time`` part is the server's (``serves``)."""

    def __init__(self, env: dict):
        self.env, self.folder = env, tempfile.TemporaryDirectory(prefix="fork-server-")
        self.socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.imports = tempfile.TemporaryFile()  # what the server's imports print
        self.commands_socket = os.path.join(self.folder.name, "commands")
        self.server = subprocess.Popen([sys.executable, "-P", __file__, str(theirs.fileno()), self.commands_socket],
                                       env=env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                       stdout=self.imports, stderr=subprocess.STDOUT)  # fmt: skip
        theirs.close()
        assert self.socket.recv(16) == b"ready", "the fork server's imports failed"
        self.imports.seek(0)
        printed = self.imports.read().decode()
        assert not printed, f"importing {', '.join(PRELOAD)} printed (as every fairseq-train would):\n{printed}"

    def commands(self, env: dict) -> dict:
        """``env`` where python, fairseq's and our console scripts and torchrun are forked from this server when they
        can be (forked_command.py; else started as they are): their folder first on PATH and as PY (the recipes'
        python), where programs that start ``sys.executable`` or a console script beside it find it too."""
        folder = Path(self.folder.name, "bin")
        if not folder.exists():
            folder.mkdir()
            client = Path(__file__).with_name("forked_command.py")
            scripts = [*Path(PYTHON).parent.glob("fairseq-*"), *Path(PYTHON).parent.glob("normformer-*")]
            for name in ("python", "torchrun", *(script.name for script in scripts)):
                (folder / name).write_text(f"#!{PYTHON} -I\n{COMMAND.decode()}\n"
                                           f"exec(compile(open({str(client)!r}).read(), {str(client)!r}, 'exec'))\n")
                (folder / name).chmod(0o755)
        return dict(env, PATH=f"{folder}{os.pathsep}{env.get('PATH', '')}", PY=str(folder / "python"),
                    FORK_SERVER=self.commands_socket)

    def serves(self, env: dict) -> bool:
        return self.server.poll() is None and import_time(env) == import_time(self.env)

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
        self.folder.cleanup()


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
    """(how, what, argv) of the Python programs a server runs: ('script', PATH) for a console script or ``python
    [-P] PATH`` ('safe-script' with -P), ('module', NAME) for ``python -m NAME``, and its ``sys.argv`` (before runpy
    sets a module's file); None for any other command. ``python -u ...`` (torchrun's workers) is the same program where
    stdout and stderr are unbuffered already (PYTHONUNBUFFERED). A command of ``commands`` is what it stands for."""
    executable = real(cmd[0])
    if executable != PYTHON:
        with open(executable, "rb") as script:
            return ("script", executable, cmd) if b"python" in script.readline() else None
    if cmd[1:2] == ["-u"]:
        return program([cmd[0], *cmd[2:]]) if os.environ.get("PYTHONUNBUFFERED") else None
    if cmd[1:2] == ["-m"]:
        return "module", cmd[2], cmd[2:]
    if cmd[1:2] == ["-P"]:
        return "safe-script", real(cmd[2]), cmd[2:]
    return ("script", real(cmd[1]), cmd[1:]) if not cmd[1].startswith("-") else None


def real(path: str) -> str:
    """The console script or python of the server's environment that a command of ``commands`` stands for; else
    ``path``."""
    try:
        with open(path, "rb") as command:
            if command.readline().startswith(b"#!") and command.readline().strip() == COMMAND:
                return os.path.join(os.path.dirname(PYTHON), os.path.basename(path))
    except OSError:
        pass
    return path


def serve(ours: socket.socket, commands: socket.socket) -> None:
    """Fork a process for each request, the client's (the run's socket the last of its files) or a command's
    (``commands``: a connection of forked_command.py, with its stdin, stdout and stderr), until the client closes its
    end; a thread reports each one's pid and exit status on the run's socket. A command's environment may differ from
    the server's in what no import reads (``import_time``); else it is refused, and starts as a new process."""
    requests = selectors.DefaultSelector()
    requests.register(ours, selectors.EVENT_READ)
    requests.register(commands, selectors.EVENT_READ)
    while True:
        for key, _ in requests.select():
            if key.fileobj is ours:
                request, fds, _, _ = socket.recv_fds(ours, 1 << 20, 5)
                if not request:
                    return
                report, server_sockets = socket.socket(fileno=fds[-1]), [ours, commands, requests]
                fork(pickle.loads(request), fds[:-1], [report, *server_sockets], killed_with_its_command=False)
                continue
            connection = commands.accept()[0]
            request, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
            cmd, env, cwd, executable, ignored = pickle.loads(request)
            if program(cmd) is not None and import_time(env) == import_time(STARTED_WITH):
                request, server_sockets = (cmd, env, cwd, executable, ignored), [ours, commands, requests]
                fork(request, fds, [connection, *server_sockets], killed_with_its_command=True)
                continue
            connection.send(b"refused")
            connection.close()
            for fd in fds:
                os.close(fd)


def fork(request: tuple, fds: list, sockets: list, killed_with_its_command: bool) -> None:
    """The run of ``request`` forked, with ``fds`` (stdin, stdout, stderr); ``sockets``: the run's and the server's."""
    pid = os.fork()
    if pid == 0:
        for server_socket in sockets:
            server_socket.close()
        exit_as_the_interpreter(lambda: run_program(*request[:3], fds, *request[3:]))
    for fd in fds:
        os.close(fd)
    report = sockets[0]
    report.send(b"%d" % pid)
    ended = threading.Event()
    threading.Thread(target=report_exit, args=(pid, report, ended), daemon=True).start()
    if killed_with_its_command:  # as a process is when SIGKILL ends the command that runs it
        threading.Thread(target=kill_when_closed, args=(pid, report, ended), daemon=True).start()


def report_exit(pid: int, report: socket.socket, ended: threading.Event) -> None:
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    ended.set()  # before the pid can be another process's
    _, status, usage = os.wait4(pid, 0)
    try:
        report.send(b"%d %f" % (os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime))
    except OSError:  # a command that was killed
        pass
    report.shutdown(socket.SHUT_RDWR)
    report.close()


def kill_when_closed(pid: int, command: socket.socket, ended: threading.Event) -> None:
    try:
        command.recv(1)  # the command sends nothing: this returns when it ends
    except OSError:
        return
    if not ended.is_set():
        os.kill(pid, signal.SIGKILL)


def import_time(env: dict) -> frozenset:
    """The part of ``env`` an import may read (Python's, threads, torch's, CUDA's, locale, LOGLEVEL of fairseq's CLIs;
    not PYTHONPATH: ``run_program`` sets it): a run whose part is the server's runs as a new process would."""
    return frozenset((key, value) for key, value in env.items() if IMPORT_TIME.match(key))


def run_program(cmd: list, env: dict, cwd: str, fds: list, executable=PYTHON, ignored=()) -> None:
    """In the forked process: the program of ``cmd`` as the interpreter runs it (``sys.executable`` ``executable``),
    ``__main__``, ``sys.argv``, ``sys.path`` (its PYTHONPATH), the root logger and the ``ignored`` signals (which an
    executed program inherits) included; its ``sys.exit`` ends this process as the interpreter ends one."""
    import runpy

    for signum in ignored:
        signal.signal(signum, signal.SIG_IGN)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    gc.collect()  # garbage of the process forked from closes its files now, not later one of the run's on its number
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # as Popen's close_fds: a new process has no other file open
    python_path = [path for path in STARTED_WITH.get("PYTHONPATH", "").split(os.pathsep) if path]
    ours = [path for path in env.get("PYTHONPATH", "").split(os.pathsep) if path]
    sys.path[:] = [*ours, *(path for path in sys.path if path not in python_path)]
    imports_set = {key: value for key, value in os.environ.items() if key not in STARTED_WITH}  # torch's cache dir
    os.environ.clear()
    os.environ.update({**imports_set, **env})
    os.chdir(cwd)
    how, what, sys.argv = program(cmd)
    sys.executable, sys.orig_argv = executable, [executable, *sys.argv]
    root_logger_of(what)
    if is_torchrun(what):
        fork_workers()
    if how == "module":
        sys.path.insert(0, cwd)
        runpy.run_module(what, run_name="__main__", alter_sys=True)
    else:
        if how == "script":
            sys.path.insert(0, os.path.dirname(os.path.abspath(what)))
        runpy.run_path(what, run_name="__main__")


def root_logger_of(what: str) -> None:
    """The root logger as the program's own imports leave it: fairseq's CLIs log to stdout (fairseq_cli.train's
    handler, the server's: they configure it before they import fairseq), torchrun leaves it unset, and a program
    that imports fairseq first has fairseq's (fairseq/tasks/text_to_speech.py: the same format, INFO, on stderr)."""
    root, name = logging.getLogger(), os.path.basename(what).replace("-", "_").removesuffix(".py")
    handler, level = FAIRSEQ_CLI_LOGGING
    if is_torchrun(what):
        handler, level = None, logging.WARNING
    elif name.removeprefix("fairseq_cli.").removeprefix("fairseq_") not in FAIRSEQ_LOGGING_TO_STDOUT:
        handler, level = logging.StreamHandler(sys.stderr), logging.INFO
        handler.setFormatter(FAIRSEQ_CLI_LOGGING[0].formatter)
    root.handlers[:], root.level = [handler] if handler else [], level


def is_torchrun(what: str) -> bool:
    return bool({what, os.path.basename(what)} & TORCHRUNS)


def fork_workers() -> None:
    """In a forked torchrun: each worker whose command ``program`` names (``python -u fairseq-train ...``) and whose
    environment is this launcher's but for what torch's agent adds is forked from this process, which has the server's
    imports, in a session of its own as torch starts one (``start_new_session``); another worker starts as in torch."""
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler

    popen = subprocess_handler.SubprocessHandler._popen

    def forked_popen(handler, args: tuple, env: dict):
        cmd = [str(arg) for arg in args]
        changed = {key for key in {*env, *os.environ} if env.get(key) != os.environ.get(key)}
        if program(cmd) is None or any(k not in WORKER_ENVIRONMENT and "TORCHELASTIC_" not in k for k in changed):
            return popen(handler, args, env)
        outputs = (handler._stdout or sys.stdout, handler._stderr or sys.stderr)  # a file of torch's --redirects
        fds = [os.open(os.devnull, os.O_RDONLY), *(output.fileno() for output in outputs)]
        gc.collect()
        gc.freeze()  # the launcher's objects too (as the server's): the worker's collections skip them
        recorded, go = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.setsid()
            os.close(go)
            os.read(recorded, 1)  # its environment is recorded before its program runs (``environment`` reads it)
            exit_as_the_interpreter(lambda: run_program(cmd, env, os.getcwd(), fds))
        os.close(fds[0])
        child = ForkedChild(cmd, pid, record_environment(pid, env))
        os.write(go, b"r")
        os.close(go)
        os.close(recorded)
        return child

    subprocess_handler.SubprocessHandler._popen = forked_popen


class ForkedChild:
    """``subprocess.Popen``'s pid, returncode, poll, wait and send_signal for a child this process forked; the record
    of its environment (``environment``) removed once it was waited for."""

    def __init__(self, args: list, pid: int, recorded: Path):
        self.args, self.pid, self.recorded, self.returncode = args, pid, recorded, None

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                self.recorded.unlink(missing_ok=True)
        return self.returncode

    def wait(self, timeout=None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)


def exit_as_the_interpreter(main) -> None:
    """In a forked process (the server's, or a launcher's agent's): ``main()`` with the signal handlers of a new
    interpreter, then the end an interpreter gives it (exit status, a traceback on stderr, its threads joined, atexit
    handlers, flushed stdio, an uncaught KeyboardInterrupt's SIGINT), never returning into the program it was forked
    from. Not the interpreter's teardown of its modules and objects (~1.3 s of CPU after torch and fairseq were
    imported, py-spy): what a test reads is written by then (files closed, logging's flushed by its atexit handler),
    and the end-to-end tests' real processes still end with a teardown."""
    for signum, handler in FRESH_SIGNAL_HANDLERS.items():
        if signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)
    status = 0
    try:
        main()
    except SystemExit as exit:
        status = exit_status(exit.code)
    except BaseException as error:
        sys.excepthook(*sys.exc_info())
        status = -signal.SIGINT if isinstance(error, KeyboardInterrupt) else 1
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    if status == -signal.SIGINT:  # as Py_RunMain ends after an uncaught KeyboardInterrupt
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status)


def exit_status(code) -> int:
    """The exit status of ``sys.exit(code)``, as the interpreter sets it: a message goes to stderr, status 1."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def record_environment(pid: int, env: dict) -> Path:
    """The environment ``env`` of forked process ``pid``, where ``environment`` finds it (/proc shows the server's)."""
    ENVIRONMENTS.mkdir(exist_ok=True)
    recorded = ENVIRONMENTS / f"{process_key(pid)}.json"
    recorded.write_text(json.dumps(env))
    return recorded


def process_key(pid: int) -> str:
    """The pid and start time (in clock ticks after boot, /proc/PID/stat): a process, even after its pid is reused."""
    return f"{pid}-{Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[19]}"


def environment(pid: int) -> dict:
    """The environment process ``pid`` runs with: the one recorded for a torchrun worker forked (``fork_workers``), or
    the one in /proc; ProcessLookupError once it has exited."""
    try:
        recorded = ENVIRONMENTS / f"{process_key(pid)}.json"
        if recorded.exists():
            return json.loads(recorded.read_text())
        entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except FileNotFoundError:  # /proc/PID: the process was reaped
        raise ProcessLookupError(f"no process {pid}") from None
    return dict(entry.decode().split("=", 1) for entry in entries if b"=" in entry)


def listen(path: str) -> socket.socket:
    commands = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    commands.bind(path)
    commands.listen(64)
    return commands


if __name__ == "__main__":
    STARTED_WITH = dict(os.environ)  # before the imports, which set some (TORCHINDUCTOR_CACHE_DIR)
    FRESH_SIGNAL_HANDLERS = {s: signal.getsignal(s) for s in signal.valid_signals() if signal.getsignal(s) is not None}
    for module in PRELOAD:
        __import__(module)
    FAIRSEQ_CLI_LOGGING = logging.getLogger().handlers[0], logging.getLogger().level  # fairseq_cli.train's
    gc.collect()
    gc.freeze()  # as the gc module's docs advise a server that forks: a child's collections skip the imports' objects
    atexit.register(gc.unfreeze)  # the server's end frees them (nanobind reports leaks otherwise)
    server_end, path = socket.socket(fileno=int(sys.argv[1])), sys.argv[2]
    commands = listen(path)
    server_end.send(b"ready")
    serve(server_end, commands)
