"""Browser end-to-end tests of the web console against the real local stack (e2e_stack.py:
PostgreSQL, Redis, `trainyard all` with the sim backend and the gateway serving web/dist).

Each scenario is a Node script (tests/e2e/*.mjs, playwright-core driving Debian's chromium);
this file starts the stack once, runs them in order with the base URL and tokens in their
environment, prints their output and asserts their exit code. Screenshots go to
$E2E_SCREENSHOTS (default tests/e2e/screenshots).

    (cd web && npm ci && npm run build) && (cd tests/e2e && npm ci) &&
    TRAINYARD_BIN=build/release/bin/trainyard /usr/bin/python3 -m pytest -q tests/e2e

The jobs-page benchmark (100,000 jobs) is test_bench.py, marked `bench`."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from e2e_stack import E2E, start

CHROMIUM = os.environ.get("E2E_CHROMIUM", "/usr/bin/chromium")


def node_ready() -> str | None:
    if not shutil.which("node"):
        return "node is not installed"
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing (apt-get install -y chromium)"
    if not (E2E / "node_modules" / "playwright-core").is_dir():
        return "tests/e2e/node_modules is missing (cd tests/e2e && npm ci)"
    return None


# Outside CI a machine without Node.js or chromium skips these; in CI (CI=true) that is a failure.
if node_ready() is not None and os.environ.get("CI") == "true":
    raise RuntimeError(f"tests/e2e cannot run in CI: {node_ready()}")
pytestmark = pytest.mark.skipif(node_ready() is not None, reason=node_ready() or "")


@pytest.fixture(scope="module")
def console_stack():
    s, env = start()
    try:
        yield s, env
    finally:
        s.stop()


def run_scenario(console_stack, script: str, timeout: int = 240) -> None:
    s, env = console_stack
    full = dict(os.environ)
    full.update(env)
    started = time.time()
    p = subprocess.run(["node", str(E2E / script)], capture_output=True, text=True, env=full,
                       timeout=timeout, cwd=str(E2E))
    print(f"--- {script} ({time.time() - started:.1f} s, exit {p.returncode})")
    print(p.stdout)
    print(p.stderr)
    assert p.returncode == 0, (f"{script} failed:\n{p.stdout}\n{p.stderr}\n"
                               f"trainyard log:\n{s.log_tail('trainyard.log', 30)}")


def test_sign_in(console_stack):
    run_scenario(console_stack, "signin.mjs")


def test_submit_form(console_stack):
    run_scenario(console_stack, "submit.mjs")


def test_live_resume_after_spot_reclaim(console_stack):
    run_scenario(console_stack, "resume.mjs")


def test_live_resume_after_preemption_by_priority(console_stack):
    run_scenario(console_stack, "preempt.mjs")


def test_bulk_cancel_job_set(console_stack):
    run_scenario(console_stack, "bulk_cancel.mjs")


def test_queue_bars_follow_admissions(console_stack):
    run_scenario(console_stack, "queues.mjs")


def test_cost_csv_matches_report(console_stack):
    run_scenario(console_stack, "costs.mjs")


def test_viewer_never_sees_rival_tenant(console_stack):
    run_scenario(console_stack, "isolation.mjs")


def test_display_name_is_text(console_stack):
    run_scenario(console_stack, "xss.mjs")


def test_accessibility_both_themes(console_stack):
    run_scenario(console_stack, "a11y.mjs")


def test_jobs_page_answers_input(console_stack):
    run_scenario(console_stack, "jobs_input.mjs", timeout=90)
