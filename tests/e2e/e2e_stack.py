"""The console's test stack: clients/python/tests/stack.py's private stack (PostgreSQL, Redis,
`trainyard all` with the sim backend) plus the REST/JSON gateway serving web/dist, seeded for
the browser scenarios: tenant demo (the demo bundle and the SDK tests' bundle), a queue of its
own (data/e2e.textproto), a second tenant "rival" with a job of its own, and tokens.

Run it by hand to poke at the console: `python3 tests/e2e/e2e_stack.py` prints the URL and
the tokens and keeps the stack up until Ctrl-C."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

E2E = Path(__file__).resolve().parent
REPO = E2E.parents[1]
sys.path.insert(0, str(REPO / "clients" / "python" / "tests"))

from stack import Stack, free_port  # noqa: E402

RIVAL_JOB_NAME = "rival-secret-job-7d1e"
# The console build to serve: web/dist, or $E2E_CONSOLE_DIR (another build of it).
DIST = Path(os.environ.get("E2E_CONSOLE_DIR") or REPO / "web" / "dist").resolve()


def rest(base: str, token: str, method: str, path: str, body=None, timeout: float = 60):
    """One REST call; returns (HTTP status, parsed JSON or raw bytes)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{base}{path}", data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status, ctype = r.read(), r.status, r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        raw, status, ctype = e.read(), e.code, e.headers.get("Content-Type", "")
    if "json" in ctype:
        return status, json.loads(raw or b"{}")
    return status, raw


def start(extra=(), sim: bool = True) -> tuple[Stack, dict]:
    """Starts and seeds the stack; returns it and the environment of the Node scenarios."""
    if not (DIST / "index.html").is_file():
        raise RuntimeError(f"{DIST}/index.html is missing: run `cd web && npm ci && npm run build`")
    s = Stack()
    gw = free_port()
    flags = [f"--gateway_listen=127.0.0.1:{gw}", f"--console_dir={DIST}", *extra]
    try:
        if sim:
            s.sim_port = free_port()
            flags.append(f"--sim_grpc_listen=127.0.0.1:{s.sim_port}")
            s.start(extra=flags)
        else:
            s.start_postgres()
            s.start_redis()
            s.start_trainyard(None, extra=flags)
            s.tokens["admin"] = s.create_token("users/admin", "platform-admin")
            s.apply(REPO / "deploy" / "local" / "demo.textproto")
            s.tokens["demo"] = s.create_token("users/demo", "member", "demo")
        s.apply(E2E / "data" / "e2e.textproto")
        s.tokens.setdefault("viewer", s.create_token("users/watcher", "viewer", "demo"))
        s.tokens["finance"] = s.create_token("users/fiona", "finance", "demo")
        s.tokens["rival"] = s.create_token("users/rex", "member", "rival")
        base = f"http://127.0.0.1:{gw}"
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("the gateway does not serve the console:\n"
                                   + s.log_tail("trainyard.log"))
            time.sleep(0.2)
        rival_job = ""
        if sim:
            status, body = rest(base, s.tokens["rival"], "POST", "/v1/tenants/rival/jobs", {
                "job": {"displayName": RIVAL_JOB_NAME,
                        "labels": {"owner": RIVAL_JOB_NAME},
                        "spec": {"project": "secretproj", "queue": "rivalq", "workers": 1,
                                 "resources": {"gpus": 1, "cpuMillis": "4000",
                                               "memoryBytes": "17179869184"},
                                 "command": ["python3", "secret.py"],
                                 "env": {"SIM_DURATION": "3600s"}}},
                "clientRequestId": "e2e-rival-1"})
            if status != 200:
                raise RuntimeError(f"rival submit: {status} {body}")
            rival_job = body["job"]["name"]
    except BaseException:
        s.stop()
        raise
    env = {
        "E2E_BASE_URL": base,
        "E2E_TOKEN_DEMO": s.tokens["demo"],
        "E2E_TOKEN_VIEWER": s.tokens["viewer"],
        "E2E_TOKEN_FINANCE": s.tokens["finance"],
        "E2E_TOKEN_ADMIN": s.tokens["admin"],
        "E2E_TOKEN_RIVAL": s.tokens["rival"],
        "E2E_RIVAL_JOB": rival_job,
        "E2E_RIVAL_JOB_NAME": RIVAL_JOB_NAME,
        "E2E_TRAINYARD_BIN": os.path.abspath(s.bin),
        "E2E_SIM_TARGET": f"127.0.0.1:{s.sim_port}" if sim else "",
    }
    return s, env


if __name__ == "__main__":
    import signal

    def _stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    s, env = start()
    try:
        for k, v in env.items():
            print(f"export {k}={v}")
        sys.stdout.flush()
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        s.stop()
