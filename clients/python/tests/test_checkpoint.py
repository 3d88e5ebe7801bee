"""trainyard.checkpoint and the example loops, in subprocesses (signals need their own
process). The API report path is covered with the live stack in test_reclaim_resume.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import PKG_ROOT, REPO

LOOP = REPO / "examples" / "train_loop.py"


def run_loop(tmp_path, *args, env=None, script=LOOP):
    e = dict(os.environ)
    for k in [k for k in e if k.startswith("TRAINYARD_") and k != "TRAINYARD_STUB_DIR"]:
        del e[k]
    e.update({"PYTHONPATH": str(PKG_ROOT), "TRAINYARD_CHECKPOINT_DIR": str(tmp_path / "ck"),
              "TRAINYARD_JOB": "tenants/demo/jobs/42", "TRAINYARD_ATTEMPT": "1"})
    e.update(env or {})
    return subprocess.Popen([sys.executable, str(script), *map(str, args)], env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def events(out):
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_manifest_and_resume_give_the_same_result(tmp_path):
    full = run_loop(tmp_path / "a", "--steps", 300, "--checkpoint-every-steps", 100)
    out, err = full.communicate(timeout=60)
    assert full.returncode == 0, err
    done = events(out)[-1]
    assert done["event"] == "done" and done["step"] == 300
    manifest = json.loads((tmp_path / "a" / "ck" / "trainyard-checkpoint.json").read_text())
    assert manifest["step"] == 300 and manifest["job"] == "tenants/demo/jobs/42"
    assert [h["step"] for h in manifest["history"]] == [300, 200, 100]
    assert os.path.isfile(manifest["uri"])

    # Interrupted at 150 steps, then resumed (from the manifest: no TRAINYARD_RESUME_FROM).
    first = run_loop(tmp_path / "b", "--steps", 150, "--checkpoint-every-steps", 100)
    first.communicate(timeout=60)
    resumed = run_loop(tmp_path / "b", "--steps", 300, "--checkpoint-every-steps", 100,
                       env={"TRAINYARD_ATTEMPT": "2"})
    out2, err2 = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err2
    evs = events(out2)
    assert evs[0]["event"] == "resumed" and evs[0]["step"] == 150
    assert evs[-1]["w"] == done["w"] and evs[-1]["b"] == done["b"]  # bit-identical
    assert abs(done["w"] - 3) < 0.05 and abs(done["b"] + 2) < 0.05


def test_sigusr1_checkpoints_now_and_sigterm_checkpoints_and_exits(tmp_path):
    p = run_loop(tmp_path, "--steps", 100000, "--step-time", 0.005,
                 "--checkpoint-every-steps", 1000000)
    # The loop prints "started" once its Checkpointer holds the signal handlers, and a
    # "checkpoint" line once it has acted on SIGUSR1: wait for each line, not a fixed time
    # (a loaded machine may take seconds to start Python).
    seen = [json.loads(p.stdout.readline())]
    assert seen[0]["event"] == "started", seen
    p.send_signal(signal.SIGUSR1)
    seen.append(json.loads(p.stdout.readline()))
    assert seen[1]["event"] == "checkpoint", seen
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    evs = seen + events(out)
    cps = [e for e in evs if e["event"] == "checkpoint"]
    # One for USR1, and one for TERM at the step it stopped at; no periodic ones. A TERM
    # that lands right after the USR1 checkpoint, before the loop's next step (a loaded
    # machine), stops at that step: it is already saved, and no second copy is written.
    stopped = evs[-1]
    assert stopped["event"] == "stopped" and stopped["step"] == cps[-1]["step"], evs
    assert len(cps) == (2 if stopped["step"] > cps[0]["step"] else 1), evs
    manifest = json.loads((tmp_path / "ck" / "trainyard-checkpoint.json").read_text())
    assert manifest["step"] == cps[-1]["step"]
    # Without an API address nothing is reported, and nothing complains.
    assert "ReportCheckpoint" not in err


def test_resume_from_env_wins_over_manifest(tmp_path):
    sys.path.insert(0, str(PKG_ROOT))
    from trainyard import checkpoint
    d = tmp_path / "ck"
    d.mkdir()
    (d / "trainyard-checkpoint.json").write_text(json.dumps(
        {"job": "", "step": 5, "uri": str(d / "step-5"), "history": []}))
    old = dict(os.environ)
    try:
        os.environ["TRAINYARD_CHECKPOINT_DIR"] = str(d)
        os.environ.pop("TRAINYARD_RESUME_FROM", None)
        c = checkpoint.Checkpointer(install_signals=False, report=False, every_steps=10)
        assert c.resume_from == str(d / "step-5")
        assert c.due(10) and not c.due(11)
        c.saved(10, d / "step-10")
        assert not c.due(10)
        os.environ["TRAINYARD_RESUME_FROM"] = "/elsewhere/step-9"
        assert checkpoint.Checkpointer(install_signals=False).resume_from == "/elsewhere/step-9"
        assert checkpoint.read_manifest(d)["step"] == 10
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_torch_variant(tmp_path):
    pytest.importorskip("torch")
    p = run_loop(tmp_path, "--steps", 50, "--checkpoint-every-steps", 20,
                 script=REPO / "examples" / "train_torch.py")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    evs = events(out)
    assert [e["step"] for e in evs if e["event"] == "checkpoint"] == [20, 40, 50]
    resumed = run_loop(tmp_path, "--steps", 60, script=REPO / "examples" / "train_torch.py")
    out2, _ = resumed.communicate(timeout=300)
    assert events(out2)[0] == {"event": "resumed", "step": 50,
                               "uri": str(tmp_path / "ck" / "step-000000050"), "attempt": 1}
