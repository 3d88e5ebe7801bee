"""The README's finance walkthrough (deploy/local/finance-walkthrough.sh), run as finance
would, against a stack with exactly the quick start's simulated cluster and demo bundle: a
spot price loaded from a CSV file, a spot job interrupted by a spot reclaim (injected through
the in-process sim's own port, `trainyard all --sim_grpc_listen`) that resumes from its
checkpoint, and this month's FOCUS CSV, `yard cost` and `trainyard accounting reconcile`
agreeing to the micro-unit."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from stack import REPO, Stack, free_port


@pytest.fixture(scope="module")
def finance_stack():
    sim_port = free_port()
    s = Stack().start(quickstart=True, extra=[f"--sim_grpc_listen=127.0.0.1:{sim_port}"])
    s.sim_addr = f"127.0.0.1:{sim_port}"
    try:
        s.tokens["finance"] = s.create_token("users/fiona", "finance", "demo")
        yield s
    finally:
        s.stop()


def test_finance_walkthrough_agrees_to_the_micro(finance_stack, tmp_path):
    s = finance_stack
    env = dict(os.environ)
    env.update({
        "TRAINYARD_ADDR": s.target,
        "TRAINYARD_TOKEN": s.tokens["demo"],
        "TRAINYARD_FINANCE_TOKEN": s.tokens["finance"],
        "TRAINYARD_POSTGRES_URL": s.postgres_url,
        "TRAINYARD_SIM_ADDR": s.sim_addr,
        "TRAINYARD_BIN": str(s.bin),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    })
    p = subprocess.run(["bash", str(REPO / "deploy" / "local" / "finance-walkthrough.sh")],
                       capture_output=True, text=True, env=env, timeout=500, cwd=str(REPO))
    out = p.stdout
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{out}\nstderr:\n{p.stderr}"
    for n in range(1, 6):
        assert f"==> {n}." in out, out
    # The spot price from the CSV file is in the book that `yard prices` printed before it
    # was loaded... and the import said what it loaded.
    assert "spot-h100" in out and "import-spot-prices" in out, out
    # The reclaim happened and the spot job resumed from a checkpoint of its first attempt.
    m = re.search(r"job (\d+) lost its node (s-\d+)", out)
    assert m, out
    job = m.group(1)
    assert f"sim://ty-{job}-1/step-" in out, out
    # The CSV and yard cost agree, lost work is its own non-zero figure, and the ledger
    # reconciles (the script checks each and exits non-zero otherwise).
    assert "they agree to the micro-unit" in out, out
    lost = re.search(r"yard cost TOTAL: .*lost work (\d+\.\d+)", out)
    assert lost and float(lost.group(1)) > 0, out
    assert out.rstrip().endswith("finance-walkthrough: done"), out
