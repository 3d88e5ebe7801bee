"""Fixtures: one private Trainyard stack per test session (see stack.py), clients for it,
and `yard` run as a subprocess. The tests never read or write the real home directory:
XDG_CONFIG_HOME and XDG_CACHE_HOME point into a temporary directory, and TRAINYARD_*
variables of the caller's environment are cleared."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PKG_ROOT = TESTS.parent
REPO = PKG_ROOT.parent.parent

# Before anything imports trainyard: a sandbox home for config and the generated stubs.
_SANDBOX = Path(tempfile.mkdtemp(prefix="trainyard-py-home-"))
atexit.register(shutil.rmtree, _SANDBOX, True)
for _key in [k for k in os.environ if k.startswith("TRAINYARD_")
             and k not in ("TRAINYARD_BIN", "TRAINYARD_PG_BIN_DIR", "TRAINYARD_KEEP_STACK_DIR")]:
    del os.environ[_key]
os.environ["XDG_CONFIG_HOME"] = str(_SANDBOX / "config")
os.environ["XDG_CACHE_HOME"] = str(_SANDBOX / "cache")
os.environ["TRAINYARD_STUB_DIR"] = str(_SANDBOX / "stubs")
sys.path.insert(0, str(PKG_ROOT))
sys.path.insert(0, str(TESTS))

import trainyard  # noqa: E402  (generates the stubs once, into the sandbox)
from stack import Stack  # noqa: E402


@pytest.fixture(scope="session")
def stack():
    s = Stack().start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def client(stack):
    with trainyard.Client(stack.target, stack.tokens["demo"], tenant="demo") as c:
        yield c


@pytest.fixture(scope="session")
def admin(stack):
    with trainyard.Client(stack.target, stack.tokens["admin"], tenant="demo") as c:
        yield c


class YardResult:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def __repr__(self):
        return f"<yard exit {self.code}\nstdout:\n{self.out}\nstderr:\n{self.err}>"


@pytest.fixture
def yard_env(stack, tmp_path):
    """Environment of a `yard` subprocess: the demo member token, a private config dir."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PKG_ROOT)
    env["TRAINYARD_ADDR"] = stack.target
    env["TRAINYARD_TOKEN"] = stack.tokens["demo"]
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    return env


@pytest.fixture
def yard(yard_env):
    """Runs `yard ARGS...` (python3 -m trainyard) and returns a YardResult."""

    def run(*args, env=None, input=None, timeout=120):
        e = dict(yard_env)
        if env:
            for k, v in env.items():
                if v is None:
                    e.pop(k, None)
                else:
                    e[k] = v
        p = subprocess.run([sys.executable, "-m", "trainyard", *map(str, args)],
                           capture_output=True, text=True, env=e, input=input,
                           timeout=timeout, cwd=str(REPO))
        return YardResult(p)

    return run
