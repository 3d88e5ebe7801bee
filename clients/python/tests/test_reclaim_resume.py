"""A job on spot capacity is killed by the sim backend's reclaim and resumes from the
checkpoint that examples/train_loop.py wrote and reported.

The sim runs no processes, so the test plays the node agent: whenever the job's attempt is
RUNNING it starts examples/train_loop.py with the environment the dispatcher gives a
worker (TRAINYARD_JOB_ID, TRAINYARD_ATTEMPT, TRAINYARD_CHECKPOINT_DIR, TRAINYARD_RESUME_FROM
from the attempt); when the sim reclaims the node (tests/data/sim-cluster.textproto: the
"flaky" pool is reclaimed at random about every 20 s, seeded) the attempt ends RECOVERING
and the test kills the worker with SIGKILL, as a lost node would. The next attempt must
resume from the last checkpoint the loop reported, and the loop must continue from it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import trainyard
from trainyard import job_pb2

from conftest import PKG_ROOT, REPO


def _worker(stack, job, attempt, ckpt_dir, resume_from, log_path):
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": str(PKG_ROOT),
        "TRAINYARD_ADDR": stack.target,
        "TRAINYARD_TOKEN": stack.tokens["demo"],
        "TRAINYARD_JOB": job.name,
        "TRAINYARD_JOB_ID": job.name.rsplit("/", 1)[-1],
        "TRAINYARD_TENANT": job.tenant,
        "TRAINYARD_ATTEMPT": str(attempt),
        "TRAINYARD_CHECKPOINT_DIR": str(ckpt_dir),
    })
    env.pop("TRAINYARD_RESUME_FROM", None)
    if resume_from:
        env["TRAINYARD_RESUME_FROM"] = resume_from
    out = open(log_path, "w")
    p = subprocess.Popen([sys.executable, str(REPO / "examples" / "train_loop.py"),
                          "--steps", "1000000", "--step-time", "0.01",
                          "--checkpoint-every-steps", "25"],
                         stdout=out, stderr=subprocess.STDOUT, env=env)
    out.close()
    return p


def _events(log_path):
    events = []
    with open(log_path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                events.append(json.loads(line))
    return events


def test_reclaimed_job_resumes_from_example_checkpoint(stack, client, tmp_path):
    ckpt_dir = tmp_path / "ckpt"
    job = client.submit({
        "name": "reclaim-resume", "queue": "flaky", "project": "default",
        "command": ["python3", "examples/train_loop.py"],
        "resources": {"gpus": 8, "gpu_model": "H100", "cpus": 8, "memory": "64Gi"},
        "spot": "required", "time_limit": "1h",
        "env": {"SIM_DURATION": "1h"},
        "checkpoint": {"directory": str(ckpt_dir), "resumable": True, "grace_period": "10s"},
    })
    workers = {}  # attempt -> (process, log path)
    deadline = time.time() + 150
    proven = None
    try:
        w = client.watch(job, from_start=True, timeout=150)
        for ev in w:
            if ev.type != job_pb2.JOB_EVENT_TYPE_STATE_CHANGED:
                continue
            if ev.to_state == job_pb2.JOB_STATE_RUNNING and ev.attempt not in workers:
                full = client.get(job, full=True)
                attempt = full.attempts[ev.attempt - 1]
                log = tmp_path / f"attempt-{ev.attempt}.log"
                workers[ev.attempt] = (_worker(stack, full, ev.attempt, ckpt_dir,
                                               attempt.resumed_from, log), log)
                # An attempt that resumes from a checkpoint our loop reported: let it run
                # until it has written a checkpoint of its own, then we have our proof.
                if attempt.resumed_from.startswith(str(ckpt_dir)):
                    proc, _ = workers[ev.attempt]
                    while time.time() < deadline:
                        evs = _events(log)
                        if any(e["event"] == "checkpoint" for e in evs) or proc.poll() is not None:
                            break
                        time.sleep(0.1)
                    proven = (ev.attempt, attempt.resumed_from)
                    w.cancel()
                    break
            elif ev.to_state in (job_pb2.JOB_STATE_RECOVERING, job_pb2.JOB_STATE_QUEUED,
                                 job_pb2.JOB_STATE_PREEMPTING) and ev.attempt in workers:
                proc, _ = workers[ev.attempt]
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)  # the node is gone
                    proc.wait()
            elif ev.to_state in trainyard.TERMINAL_STATES:
                break
        assert proven is not None, (
            f"no attempt resumed from a reported checkpoint; attempts: "
            f"{client.get(job, full=True).attempts}")
        resumed_attempt, resumed_from = proven
        full = client.get(job, full=True)
        before = full.attempts[resumed_attempt - 2]
        # The previous attempt was lost to the reclaim (or, if the sim reclaimed the node
        # before launch, to the launch refusal) -- a platform failure, not a user error.
        reclaimed = [a for a in full.attempts[:resumed_attempt - 1]
                     if a.failure_class == job_pb2.FAILURE_CLASS_SPOT_RECLAIM]
        assert reclaimed, full.attempts
        assert before.failure_class != job_pb2.FAILURE_CLASS_USER_ERROR
        # It resumed from the newest checkpoint the loop reported before the reclaim...
        reported = [cp for cp in client.checkpoints(job) if cp.attempt < resumed_attempt]
        newest = max(reported, key=lambda cp: cp.step)
        assert resumed_from == newest.uri
        # ... which is a real file the loop wrote, named in the manifest history.
        assert os.path.isfile(resumed_from)
        manifest = json.loads((ckpt_dir / "trainyard-checkpoint.json").read_text())
        assert resumed_from in [h["uri"] for h in manifest["history"]]
        with open(resumed_from) as f:
            saved_step = json.load(f)["step"]
        assert saved_step == newest.step
        # The loop of the new attempt continued from that step and checkpointed beyond it.
        evs = _events(workers[resumed_attempt][1])
        assert evs[0] == {"event": "resumed", "step": saved_step, "uri": resumed_from,
                          "attempt": resumed_attempt}
        later = [e["step"] for e in evs if e["event"] == "checkpoint"]
        assert later and min(later) > saved_step
    finally:
        for proc, _ in workers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        client.cancel(job)
