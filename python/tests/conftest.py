"""Fixtures: a private redis-server on a free loopback port (as
tests/support/redis_server.c does for the C tests), the CLI of this build."""

import importlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# A sanitizer build preloads its runtime into this interpreter
# (python/CMakeLists.txt); the programs the tests start (the CLI, built with
# the runtime linked in, and redis-server) must not get it. Python children
# that import the extension get it back (python_env()).
PRELOAD = os.environ.pop("LD_PRELOAD", None)


def python_env(**extra):
    """The environment of a python3 child that imports the extension."""
    env = dict(os.environ, **extra)
    if PRELOAD:
        env["LD_PRELOAD"] = PRELOAD
    return env
SOURCE_DIR = os.environ.get("PORTEIRO_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ping(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """A redis-server of this test: start, kill -9, restart on the same
    port, freeze (SIGSTOP) and thaw."""

    def __init__(self):
        self.port = None
        self.proc = None
        self.dir = tempfile.mkdtemp(prefix="porteiro-py-redis.")

    @property
    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    @property
    def pid(self):
        return self.proc.pid

    def start(self, port=None):
        for _ in range(20):
            self.port = port or free_port()
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", self.dir],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if _ping(self.port):
                    return self
                if self.proc.poll() is not None:
                    break
                time.sleep(0.01)
            self.kill()
            if port is not None:
                time.sleep(0.1)  # the same port: once it is free again
        raise RuntimeError("redis-server did not start")

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()

    def freeze(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server():
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (scripts/deps.sh installs it)")
    r = RedisServer().start()
    yield r
    r.stop()


@pytest.fixture
def own_redis():
    """A redis-server for one test (killed, frozen...)."""
    r = RedisServer().start()
    yield r
    r.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server):
    return redis_server.url


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("PORTEIRO_CLI")
    if not path:
        guess = os.path.join(SOURCE_DIR, "build", "porteiro")
        path = guess if os.path.exists(guess) else shutil.which("porteiro")
    if not path:
        pytest.fail("no porteiro CLI (set PORTEIRO_CLI)")
    return path


_n = [0]


@pytest.fixture
def key(request):
    """A key no other test uses."""
    _n[0] += 1
    return "py:%s:%d:%d" % (request.node.name, os.getpid(), _n[0])


def python():
    return sys.executable


def _debian_installed(package):
    """dpkg says package is installed (False where there is no dpkg)."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package],
                             capture_output=True, text=True, check=False).stdout
    except OSError:
        return False
    return out.strip() == "install ok installed"


def need(module, package=None):
    """pytest.importorskip, but a skip only where the dependency is really
    absent: a module whose Debian package is installed (scripts/deps.sh
    installs python3-flask, python3-fastapi, python3-django and
    python3-uvloop) must import, and a failed import fails the test instead
    of skipping it (a skip would show test_python as Passed)."""
    package = package or "python3-" + module
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if _debian_installed(package):
            pytest.fail("%s does not import although %s is installed: %s" % (module, package, e),
                        pytrace=False)
        pytest.skip("%s is not installed (%s)" % (package, e))
