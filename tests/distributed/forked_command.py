"""A command of a fork server (fork_server.py ``ForkServer.commands``): python, a console script or torchrun on
PATH, which asks the server (FORK_SERVER) to fork the program it stands for with this process's arguments, environment,
working directory, stdin, stdout, stderr and ignored signals, and ends as it ends: its exit status, or death by the
same signal. The signals a process is sent to stop or save (TERM, INT, HUP, QUIT, USR1, USR2) are forwarded to it
unless ignored; SIGKILL of this process kills it (the server sees the connection close). A program the server refuses
(not Python's, or an environment its imports would read differently) is executed here instead, as the command would
run it. Run by the python of the server's environment in isolated mode (-I): the standard library only."""
import os
import pickle
import signal
import socket
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def forked_command(argv: list) -> int:
    folder, name = os.path.split(os.path.abspath(argv[0]))
    real = [os.path.join(os.path.dirname(sys.executable), name), *argv[1:]]  # the program this command stands for
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        server.connect(os.environ["FORK_SERVER"])
    except (KeyError, OSError):  # no server: the command as it is
        os.execv(real[0], real)
    ignored = [signum for signum in signal.valid_signals() if signal.getsignal(signum) == signal.SIG_IGN]
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)  # until there is a run to forward them to
    request = pickle.dumps((real, dict(os.environ), os.getcwd(), os.path.join(folder, "python"), ignored))
    socket.send_fds(server, [request], [0, 1, 2])
    reply = server.recv(64)
    if reply == b"refused":
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        os.execv(real[0], real)
    for signum in set(FORWARDED) - set(ignored):  # an ignored one is the run's too, as an executed program's
        signal.signal(signum, lambda signum, _, pid=int(reply): os.kill(pid, signum))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    ended = server.recv(64)
    if not ended:
        sys.exit(f"{name}: the fork server ended before the run did")
    status = int(ended.split()[0])
    if status < 0:  # died of a signal: so does this process
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status


sys.exit(forked_command(sys.argv))
