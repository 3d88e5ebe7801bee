"""A job reports its checkpoints with nothing but what the dispatcher put in its
environment: TRAINYARD_ADDR and a job-scoped TRAINYARD_TOKEN (docs/security.md "Job
tokens"), never the researcher's token.

The stack is the production layout in small: `trainyard all` runs the api and the scheduler,
`trainyard dispatcher` runs on its own against a `trainyard sim-cluster`, and the two share
the job token key through --job_token_key_file. The sim runs no processes, so the test plays
the node agent: it reads the environment the attempt was launched with from the sim cluster
(SimClusterService.GetAttempt) and starts examples/train_loop.py with exactly that
environment (plus PATH and where the Python package lives).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import grpc
import pytest

import trainyard
from trainyard import errors

from conftest import PKG_ROOT, REPO, TESTS
from stack import Stack


@pytest.fixture(scope="module")
def split_stack():
    s = Stack()
    try:
        key_file = s.dir / "job-token.key"
        key_file.write_text("# job token keys: the first signs, all verify\n"
                            + os.urandom(32).hex() + "\n")
        key_file.chmod(0o644)  # PostgreSQL's OS user owns the directory when run as root
        s.start_postgres()
        s.start_redis()
        s.start_sim_cluster(TESTS / "data" / "sim-cluster.textproto")
        s.start_trainyard(None, extra=[f"--job_token_key_file={key_file}"])
        s.start_dispatcher(extra=[f"--job_token_key_file={key_file}",
                                  f"--api_advertise_addr={s.target}"])
        s.tokens["admin"] = s.create_token("users/admin", "platform-admin")
        s.apply(REPO / "deploy" / "local" / "demo.textproto")
        s.tokens["demo"] = s.create_token("users/demo", "member", "demo")
        yield s
    finally:
        s.stop()


def _launch_env(stack, backend_name):
    from trainyard.v1 import sim_pb2, sim_pb2_grpc
    with grpc.insecure_channel(stack.sim_target) as ch:
        stub = sim_pb2_grpc.SimClusterServiceStub(ch)
        attempt = stub.GetAttempt(sim_pb2.GetSimAttemptRequest(name=backend_name), timeout=10)
    return dict(attempt.env)


def _wait_state(client, job, states, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        j = client.get(job)
        if trainyard.state_name(j.state) in states:
            return j
        time.sleep(0.2)
    raise AssertionError(f"{job} did not reach {states}: {trainyard.state_name(j.state)}")


def test_job_reports_checkpoints_with_only_the_injected_env(split_stack, tmp_path):
    s = split_stack
    ckpt_dir = tmp_path / "ck"
    with trainyard.Client(s.target, s.tokens["demo"], tenant="demo") as researcher:
        spec = {
            "name": "job-token-e2e", "queue": "default", "project": "default",
            "command": ["python3", "examples/train_loop.py"],
            "resources": {"gpus": 1, "cpus": 2, "memory": "8Gi"},
            "time_limit": "30m", "env": {"SIM_DURATION": "10m"},
            "checkpoint": {"directory": str(ckpt_dir), "resumable": True},
        }
        job = researcher.submit(spec)
        _wait_state(researcher, job.name, {"RUNNING"})
        running = researcher.get(job.name, full=True)
        backend_name = running.attempts[-1].backend_job_name

        env = _launch_env(s, backend_name)
        assert env["TRAINYARD_ADDR"] == s.target
        assert env["TRAINYARD_JOB"] == job.name
        assert env["TRAINYARD_CHECKPOINT_DIR"] == str(ckpt_dir)
        token = env["TRAINYARD_TOKEN"]
        assert token.startswith(f"tyj.demo.{job.name.rsplit('/', 1)[-1]}.")
        assert s.tokens["demo"] not in env.values()

        # The worker: the injected environment and nothing of ours (no researcher token,
        # no context: a private, empty config home).
        worker_env = dict(env)
        worker_env.update({
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(PKG_ROOT),
            "XDG_CONFIG_HOME": str(tmp_path / "worker-config"),
            "XDG_CACHE_HOME": os.environ["XDG_CACHE_HOME"],
            "TRAINYARD_STUB_DIR": os.environ["TRAINYARD_STUB_DIR"],
        })
        p = subprocess.run([sys.executable, str(REPO / "examples" / "train_loop.py"),
                            "--steps", "60", "--step-time", "0.01",
                            "--checkpoint-every-steps", "20"],
                           env=worker_env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "ReportCheckpoint" not in p.stderr, p.stderr  # no failed report
        manifest = json.loads((ckpt_dir / "trainyard-checkpoint.json").read_text())
        assert manifest["step"] == 60

        # The reports landed, for attempt 1, and set the job's resume point.
        cps = list(researcher.checkpoints(job.name))
        assert sorted(c.step for c in cps) == [20, 40, 60], cps
        assert all(c.attempt == 1 for c in cps)
        assert researcher.get(job.name).resume_from == manifest["uri"]

        # The same token can do nothing else: not submit, not cancel its own job.
        with trainyard.Client(s.target, token, tenant="demo") as worker:
            assert worker.get(job.name).name == job.name
            with pytest.raises(errors.PermissionDenied) as e:
                worker.submit(spec)
            assert "job token" in str(e.value)
            with pytest.raises(errors.PermissionDenied):
                worker.cancel(job.name)
        researcher.cancel(job.name)
