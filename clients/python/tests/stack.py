"""A private Trainyard stack for the Python tests: PostgreSQL, Redis and `trainyard all`
on free 127.0.0.1 ports in a temporary directory, torn down at the end.

The `trainyard` binary is $TRAINYARD_BIN, else build/release/bin/trainyard of the
repository. As root, PostgreSQL runs as the `postgres` OS user (it refuses to run as root),
like tests/fixtures/local_postgres.cc.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TESTS = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trainyard_bin() -> str:
    env = os.environ.get("TRAINYARD_BIN")
    path = Path(env) if env else REPO / "build" / "release" / "bin" / "trainyard"
    if not path.is_file() or not os.access(path, os.X_OK):
        raise RuntimeError(f"trainyard binary not found at {path} (build it with "
                           "`cmake --preset release && cmake --build --preset release`, or set "
                           "TRAINYARD_BIN)")
    return str(path)


def pg_bin_dir() -> str:
    env = os.environ.get("TRAINYARD_PG_BIN_DIR")
    if env:
        return env
    found = []
    for d in glob.glob("/usr/lib/postgresql/*/bin"):
        version = Path(d).parent.name
        if version.isdigit() and os.access(os.path.join(d, "initdb"), os.X_OK):
            found.append((int(version), d))
    if found:
        return max(found)[1]
    initdb = shutil.which("initdb")
    if initdb:
        return os.path.dirname(initdb)
    raise RuntimeError("PostgreSQL server binaries (initdb, postgres) not found; "
                       "apt-get install postgresql")


class Stack:
    """Starts and stops the processes; exposes addresses and tokens."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="trainyard-py-"))
        os.chmod(self.dir, 0o755)
        self.bin = trainyard_bin()
        self.procs: list = []
        self.run_as = None
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root and there is no `postgres` OS user to "
                                   "run PostgreSQL as") from None
            self.run_as = pw
        self.pg_port = self.redis_port = self.grpc_port = self.http_port = 0
        self.tokens: dict = {}

    # --- processes -------------------------------------------------------------------------

    def _spawn(self, argv, log_name, **kw):
        log = open(self.dir / log_name, "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True, **kw)
        log.close()
        self.procs.append(p)
        return p

    def _run(self, argv, **kw) -> subprocess.CompletedProcess:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, argv))} failed ({r.returncode}):\n"
                               f"{r.stdout}\n{r.stderr}")
        return r

    def log_tail(self, name: str, n: int = 40) -> str:
        try:
            return "\n".join((self.dir / name).read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def start_postgres(self) -> None:
        bindir = pg_bin_dir()
        data = self.dir / "pgdata"
        user_kw = {}
        if self.run_as is not None:
            data.mkdir()
            os.chown(data, self.run_as.pw_uid, self.run_as.pw_gid)
            os.chown(self.dir, self.run_as.pw_uid, self.run_as.pw_gid)
            user_kw = {"user": self.run_as.pw_uid, "group": self.run_as.pw_gid,
                       "extra_groups": []}
        self._run([f"{bindir}/initdb", "-D", str(data), "--auth=trust", "-U", "trainyard",
                   "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"],
                  cwd=self.dir, **user_kw)
        for attempt in range(5):
            self.pg_port = free_port()
            p = self._spawn([f"{bindir}/postgres", "-D", str(data),
                             "-c", "listen_addresses=127.0.0.1", "-c", f"port={self.pg_port}",
                             "-c", f"unix_socket_directories={self.dir}",
                             "-c", "max_connections=200", "-c", "fsync=off",
                             "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                            "pg.log", cwd=self.dir, **user_kw)
            deadline = time.time() + 60
            while time.time() < deadline and p.poll() is None:
                r = subprocess.run([f"{bindir}/pg_isready", "-q", "-h", "127.0.0.1", "-p",
                                    str(self.pg_port)], capture_output=True)
                if r.returncode == 0:
                    break
                time.sleep(0.1)
            if p.poll() is None:
                break
            self.procs.remove(p)
        else:
            raise RuntimeError("postgres did not start:\n" + self.log_tail("pg.log"))
        self._run([f"{bindir}/createdb", "-h", "127.0.0.1", "-p", str(self.pg_port),
                   "-U", "trainyard", "trainyard"])
        self.postgres_url = f"postgresql://trainyard@127.0.0.1:{self.pg_port}/trainyard"

    def start_redis(self) -> None:
        redis = shutil.which("redis-server") or "/usr/bin/redis-server"
        for attempt in range(5):
            self.redis_port = free_port()
            p = self._spawn([redis, "--port", str(self.redis_port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(self.dir),
                             "--daemonize", "no", "--logfile", ""], "redis.log")
            deadline = time.time() + 20
            while time.time() < deadline and p.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", self.redis_port), 0.5) as s:
                        s.sendall(b"PING\r\n")
                        if s.recv(16).startswith(b"+PONG"):
                            break
                except OSError:
                    time.sleep(0.05)
            if p.poll() is None:
                break
            self.procs.remove(p)
        else:
            raise RuntimeError("redis did not start:\n" + self.log_tail("redis.log"))

    def trainyard(self, *args) -> str:
        return self._run([self.bin, *args]).stdout

    def create_token(self, principal: str, role: str, tenant: str = "", ttl: str = "2h") -> str:
        args = ["token", "create", f"--postgres_url={self.postgres_url}",
                f"--principal={principal}", f"--role={role}", f"--ttl={ttl}"]
        if tenant:
            args.append(f"--tenant={tenant}")
        out = self.trainyard(*args)
        tokens = [line for line in out.splitlines() if line.startswith("ty_")]
        if len(tokens) != 1:
            raise RuntimeError(f"token create printed no token:\n{out}")
        return tokens[0]

    def start_trainyard(self, sim_config, extra=()) -> None:
        """`trainyard all`; with sim_config None, only the api and the scheduler (the
        dispatcher then runs on its own: start_sim_cluster + start_dispatcher)."""
        self.trainyard("migrate", f"--postgres_url={self.postgres_url}")
        sim = [f"--sim_config={sim_config}"] if sim_config is not None else []
        for attempt in range(3):
            self.grpc_port, self.http_port = free_port(), free_port()
            p = self._spawn([self.bin, "all", f"--grpc_listen=127.0.0.1:{self.grpc_port}",
                             f"--http_listen=127.0.0.1:{self.http_port}",
                             f"--postgres_url={self.postgres_url}",
                             f"--redis_addr=127.0.0.1:{self.redis_port}",
                             *sim, "--db_pool_size=8",
                             "--schedule_interval=500ms", "--dispatch_interval=250ms",
                             "--meter_interval=1s",
                             "--log_level=info", *extra], "trainyard.log")
            deadline = time.time() + 60
            ready = False
            while time.time() < deadline and p.poll() is None:
                try:
                    with urllib.request.urlopen(
                            f"http://127.0.0.1:{self.http_port}/readyz", timeout=1) as r:
                        if r.status == 200:
                            ready = True
                            break
                except OSError:
                    pass
                time.sleep(0.1)
            if ready:
                self.trainyard_proc = p
                return
            if p.poll() is None:
                p.kill()
                p.wait()
            self.procs.remove(p)
        raise RuntimeError("trainyard all did not become ready:\n" + self.log_tail("trainyard.log"))

    def _wait_healthy(self, p, http_port: int, log_name: str, what: str) -> None:
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz",
                                            timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{what} did not start:\n" + self.log_tail(log_name))

    def start_sim_cluster(self, sim_config: Path) -> None:
        """`trainyard sim-cluster`: the simulated cluster as a process of its own, serving
        SimClusterService on self.sim_target."""
        self.sim_port, sim_http = free_port(), free_port()
        p = self._spawn([self.bin, "sim-cluster", f"--sim_config={sim_config}",
                         f"--grpc_listen=127.0.0.1:{self.sim_port}",
                         f"--http_listen=127.0.0.1:{sim_http}", "--log_level=info"],
                        "sim-cluster.log")
        self._wait_healthy(p, sim_http, "sim-cluster.log", "trainyard sim-cluster")

    @property
    def sim_target(self) -> str:
        return f"127.0.0.1:{self.sim_port}"

    def start_dispatcher(self, extra=()) -> None:
        """`trainyard dispatcher --sim_target=...` (after start_sim_cluster)."""
        http = free_port()
        p = self._spawn([self.bin, "dispatcher", f"--sim_target={self.sim_target}",
                         f"--http_listen=127.0.0.1:{http}",
                         f"--postgres_url={self.postgres_url}",
                         f"--redis_addr=127.0.0.1:{self.redis_port}",
                         "--dispatch_interval=250ms", "--log_level=info", *extra],
                        "dispatcher.log")
        self._wait_healthy(p, http, "dispatcher.log", "trainyard dispatcher")

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def apply(self, path: Path) -> None:
        self.trainyard("apply", "-f", str(path), f"--target={self.target}",
                       f"--token={self.tokens['admin']}")

    def start(self, quickstart: bool = False, extra=()) -> "Stack":
        """Starts everything. quickstart=True runs exactly the quick start's cluster and
        bundle (deploy/local/sim-cluster.textproto, demo.textproto), without the test
        additions. `extra`: more flags of `trainyard all`."""
        try:
            self.start_postgres()
            self.start_redis()
            self.start_trainyard(REPO / "deploy" / "local" / "sim-cluster.textproto"
                                 if quickstart else TESTS / "data" / "sim-cluster.textproto",
                                 extra=extra)
            self.tokens["admin"] = self.create_token("users/admin", "platform-admin")
            self.apply(REPO / "deploy" / "local" / "demo.textproto")
            self.tokens["demo"] = self.create_token("users/demo", "member", "demo")
            if quickstart:
                return self
            self.apply(TESTS / "data" / "bundle.textproto")
            self.tokens["viewer"] = self.create_token("users/watcher", "viewer", "demo")
            self.tokens["other"] = self.create_token("users/olga", "member", "other")
            self.expired_at = time.time() + 1
            self.tokens["expired"] = self.create_token("users/late", "member", "demo", ttl="1s")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        # trainyard first (it holds connections), then Redis, then PostgreSQL (SIGINT: fast
        # shutdown).
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGINT if "postgres" in str(p.args[0]) else signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs.clear()
        if os.environ.get("TRAINYARD_KEEP_STACK_DIR"):
            print(f"stack directory kept: {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
