"""The README's quick-start walkthrough (deploy/local/walkthrough.sh), run as a user would,
against a stack with exactly the quick start's simulated cluster and demo bundle: four
training jobs fill the demo queue, an urgent one preempts one of them, and the preempted job
resumes from its checkpoint and succeeds."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from stack import REPO, Stack


@pytest.fixture(scope="module")
def quickstart_stack():
    s = Stack().start(quickstart=True)
    try:
        yield s
    finally:
        s.stop()


def test_walkthrough_shows_preemption_and_resume(quickstart_stack, tmp_path):
    env = dict(os.environ)
    env["TRAINYARD_ADDR"] = quickstart_stack.target
    env["TRAINYARD_TOKEN"] = quickstart_stack.tokens["demo"]
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    p = subprocess.run(["bash", str(REPO / "deploy" / "local" / "walkthrough.sh")],
                       capture_output=True, text=True, env=env, timeout=400, cwd=str(REPO))
    out = p.stdout
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{out}\nstderr:\n{p.stderr}"
    # Every step ran and printed the yard commands it used.
    for n in range(1, 6):
        assert f"==> {n}." in out
    assert "$ yard submit -f examples/jobs/quickstart-train.yaml" in out
    assert "$ yard watch" in out
    # The watch showed the preemption and the resume.
    m = re.search(r"job (\d+) resumed from (\S+) and succeeded", out)
    assert m, out
    victim, uri = m.group(1), m.group(2)
    assert uri.startswith(f"sim://ty-{victim}-1/step-"), uri
    watch = out[out.index("$ yard watch"):]
    assert "PREEMPTING" in watch and "SUCCEEDED" in watch, watch
    assert out.rstrip().endswith("walkthrough: done")
