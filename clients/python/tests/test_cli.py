"""`yard` end to end (a subprocess per command) against the live stack."""

from __future__ import annotations

import json
import time
import uuid

import yaml

JOB_YAML = """\
name: {name}
queue: {queue}
project: default
command: [python3, train.py]
resources: {{gpus: {gpus}, cpus: 2, memory: 8Gi}}
time_limit: 10m
env: {{SIM_DURATION: 1s}}
"""


def write_job(tmp_path, name, queue="default", gpus=1, extra=""):
    p = tmp_path / f"{name}.yaml"
    p.write_text(JOB_YAML.format(name=name, queue=queue, gpus=gpus) + extra)
    return p


def test_help_everywhere(yard):
    top = yard("--help")
    assert top.code == 0 and "Exit codes" in top.out
    for cmd in ("submit", "get", "jobs", "cancel", "hold", "release", "watch", "wait", "why", "queues", "quota",
                "checkpoints", "report", "cost", "prices", "invoice", "budgets", "budget",
                "whoami", "context"):
        r = yard(cmd, "--help")
        assert r.code == 0, r
        assert f"usage: yard {cmd}" in r.out
    r = yard("frobnicate")
    assert r.code == 2 and "invalid choice" in r.err
    r = yard()
    assert r.code == 2


def test_submit_wait_get_and_json(yard, tmp_path):
    path = write_job(tmp_path, "cli-ok")
    r = yard("submit", "-f", path, "--wait", "--timeout", "60")
    assert r.code == 0, r
    assert "SUCCEEDED" in r.out and "RUNNING" in r.out
    name = r.out.split("submitted ", 1)[1].split(";", 1)[0]
    job_id = name.rsplit("/", 1)[-1]
    g = yard("get", job_id, "-o", "json")
    assert g.code == 0, g
    data = json.loads(g.out)
    assert data["name"] == name and data["state"] == "JOB_STATE_SUCCEEDED"
    assert data["attempts"][0]["index"] == 1
    t = yard("get", name)
    assert t.code == 0 and "State:" in t.out and "SUCCEEDED" in t.out and "ATTEMPT" in t.out
    y = yard("-o", "yaml", "get", job_id)
    assert yaml.safe_load(y.out)["display_name"] == "cli-ok"


def test_get_shows_the_schedulers_cost_estimate(yard, tmp_path):
    """A job's cost estimate is the scheduler's expected cost of its attempt: on-demand-h100
    at the demo book's rates, 1 GPU x $4 + 2 cores x $0.04 + 8 GiB x $0.005 = $4.12 an
    hour, for its 10-minute time limit: $0.686666... -> 686,667 micros (half up)."""
    path = write_job(tmp_path, "cli-estimate")
    r = yard("submit", "-f", path, "--wait", "--timeout", "60")
    assert r.code == 0, r
    job_id = r.out.split("submitted ", 1)[1].split(";", 1)[0].rsplit("/", 1)[-1]
    data = json.loads(yard("get", job_id, "-o", "json").out)
    assert data["attempts"][0]["flavor"] == "flavors/on-demand-h100", data
    assert int(data["attempts"][0]["estimated_cost"]["micros"]) == 686_667, data
    assert int(data["cost"]["estimate"]["micros"]) == 686_667, data
    t = yard("get", job_id)
    assert t.code == 0, t
    line = next(x for x in t.out.splitlines() if x.strip().startswith("Estimate"))
    assert "0.69 USD" in line, t.out


def test_submit_failing_job_exits_6(yard, tmp_path):
    path = write_job(tmp_path, "cli-fail",
                     extra="retry: {max_attempts: 1}\n").read_text().replace(
        "SIM_DURATION: 1s", "SIM_DURATION: 1s, SIM_EXIT_CODE: '3'")
    p = tmp_path / "fail.yaml"
    p.write_text(path)
    r = yard("submit", "-f", p, "--wait", "--timeout", "60", "-q")
    assert r.code == 6, r
    assert "FAILED" in r.out


def test_bad_yaml_unknown_field_and_missing_file(yard, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nresources:\n  gpus: 1\n   cpus: 2\n")
    r = yard("submit", "-f", bad)
    assert r.code == 2, r
    assert f"{bad}:4:" in r.err and "invalid YAML" in r.err
    assert "Traceback" not in r.err
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("name: x\nqueue: default\nworkers: 1\nresources:\n  gpus: 1\n  gpu_modle: H100\n")
    r = yard("submit", "-f", unknown)
    assert r.code == 2, r
    assert f"{unknown}:6: resources.gpu_modle: unknown field 'gpu_modle'" in r.err
    r = yard("submit", "-f", tmp_path / "absent.yaml")
    assert r.code == 2 and "cannot read file" in r.err


def test_server_side_errors_exit_codes(yard, tmp_path, stack):
    r = yard("submit", "-f", write_job(tmp_path, "noq", queue="nope"))
    assert r.code == 2 and "job.spec.queue" in r.err, r
    r = yard("get", "987654")
    assert r.code == 3 and "NOT_FOUND" in r.err, r
    r = yard("jobs", env={"TRAINYARD_TOKEN": stack.tokens["expired"]})
    assert r.code == 4 and "UNAUTHENTICATED" in r.err, r
    r = yard("jobs", "--addr", "127.0.0.1:1", "--request-timeout", "2")
    assert r.code == 5 and "UNAVAILABLE" in r.err, r
    r = yard("report", "--period", "2026-11", "--group-by", "project", "--format", "csv")
    assert r.code == 4 and "PERMISSION_DENIED" in r.err, r
    r = yard("report", "--period", "2026-11", "--group-by", "project", "--format", "csv",
             "--all-tenants", env={"TRAINYARD_TOKEN": stack.tokens["admin"]})
    assert r.code == 0 and r.out.startswith("BillingAccountId,"), r
    for out in (r.err,):
        assert "Traceback" not in out


def test_jobs_cancel_why_watch(yard, tmp_path, stack):
    js = f"cli-{uuid.uuid4().hex[:6]}"
    path = write_job(tmp_path, "pending", queue="tiny", gpus=8,
                     extra=f"job_set: {js}\n")
    ids = []
    for _ in range(2):
        r = yard("submit", "-f", path, "-o", "json")
        assert r.code == 0, r
        ids.append(json.loads(r.out)[0]["name"].rsplit("/", 1)[-1])
    r = yard("jobs", "--queue", "tiny", "--state", "queued")
    assert r.code == 0 and r.out.startswith("ID")
    listed = [line.split()[0] for line in r.out.splitlines()[1:]]
    assert set(ids) <= set(listed)
    r = yard("jobs", "--state", "bogus")
    assert r.code == 2 and "unknown state" in r.err
    r = yard("why", ids[1])
    assert r.code == 0 and "Position:" in r.out and "QUEUED" in r.out, r
    r = yard("why", ids[1], "-o", "json")
    assert json.loads(r.out)["state"] == "JOB_STATE_QUEUED"
    r = yard("cancel", *ids, "987654", "--reason", "cli test")
    assert r.code == 3, r  # the unknown one; the others were cancelled
    assert r.out.count("CANCELLED") == 2
    r = yard("watch", ids[0], "--timeout", "10")
    assert r.code == 0, r
    lines = r.out.splitlines()
    assert "QUEUED" in lines[0] and "CANCELLED" in lines[-1] and "cli test" in r.out
    r = yard("watch", ids[0], "-o", "json", "--timeout", "10")
    events = [json.loads(line) for line in r.out.splitlines()]
    seqs = [int(e["sequence"]) for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and len(seqs) >= 2
    r = yard("jobs", "--all-tenants", "--job-set", js, env={"TRAINYARD_TOKEN": stack.tokens["admin"]})
    assert r.code == 0 and "TENANT" in r.out.splitlines()[0] and "demo" in r.out


def test_jobs_by_user_creation_time_and_order(yard, tmp_path, stack):
    js = f"who-{uuid.uuid4().hex[:6]}"
    path = write_job(tmp_path, "who", queue="tiny", gpus=8, extra=f"job_set: {js}\n")
    mine, admins = [], []
    for token, ids in ((None, mine), (stack.tokens["admin"], admins), (None, mine)):
        r = yard("submit", "-f", path, "-o", "json",
                 env={"TRAINYARD_TOKEN": token, "TRAINYARD_TENANT": "demo"} if token else None)
        assert r.code == 0, r
        ids.append(int(json.loads(r.out)[0]["name"].rsplit("/", 1)[-1]))

    def listed(*flags):
        r = yard("jobs", "--job-set", js, *flags)
        assert r.code == 0, r
        return [int(line.split()[0]) for line in r.out.splitlines()[1:]]

    assert listed("--user", "demo") == sorted(mine, reverse=True)
    assert listed("--user", "users/admin") == admins
    assert listed("--order-by", "create_time") == sorted(mine + admins)
    assert listed("--created-after", "2999-01-01T00:00:00Z") == []
    assert sorted(listed("--created-before", "2999-01-01T00:00:00Z")) == sorted(mine + admins)
    r = yard("jobs", "--created-after", "yesterday")
    assert r.code == 2 and "RFC 3339" in r.err, r
    r = yard("jobs", "--order-by", "colour")
    assert r.code == 2 and "order_by" in r.err, r


def test_hold_and_release(yard, tmp_path, client):
    # The tiny queue's 1 GPU never fits an 8-GPU job: these stay pending.
    path = write_job(tmp_path, "holdme", queue="tiny", gpus=8)
    ids = []
    for _ in range(2):
        r = yard("submit", "-f", path, "-o", "json")
        assert r.code == 0, r
        ids.append(json.loads(r.out)[0]["name"].rsplit("/", 1)[-1])
    before = client.get(ids[0])
    r = yard("hold", *ids, "--reason", "data not ready")
    assert r.code == 0, r
    assert r.out.count("HELD") == 2, r
    r = yard("why", ids[0])
    assert r.code == 0 and "HELD" in r.out and "data not ready" in r.out, r
    r = yard("jobs", "--queue", "tiny", "--state", "held")
    assert r.code == 0 and set(ids) <= {line.split()[0] for line in r.out.splitlines()[1:]}, r
    r = yard("release", ids[0], "-o", "json")
    assert r.code == 0, r
    released = json.loads(r.out)[0]
    assert released["state"] == "JOB_STATE_QUEUED"
    assert released["state_reason"] == "RELEASED_BY_USER", released
    after = client.get(ids[0])
    assert after.create_time == before.create_time  # its place in line is kept
    r = yard("watch", ids[0], "--timeout", "3")
    assert "HELD" in r.out and "data not ready" in r.out, r
    # A cancelled job cannot be held: exit 9 (conflict), naming the state; an unknown one: 3.
    r = yard("cancel", ids[1])
    assert r.code == 0, r
    r = yard("hold", ids[1])
    assert r.code == 9 and "CANCELLED" in r.err, r
    r = yard("release", "987654")
    assert r.code == 3, r
    yard("cancel", ids[0])


def test_queues_quota_checkpoints_whoami(yard, client):
    r = yard("queues")
    assert r.code == 0, r
    names = [line.split()[0] for line in r.out.splitlines()[1:]]
    assert {"default", "tiny", "flaky"} <= set(names)
    r = yard("quota", "default")
    assert r.code == 0 and "on-demand-h100" in r.out and "unlimited" in r.out, r
    r = yard("quota", "default", "-o", "json")
    rows = json.loads(r.out)
    assert any(row["flavor"] == "spot-h100" and row["resource"] == "GPU"
               and row["nominal"] == 16 and row["borrowing_limit"] is None for row in rows)
    r = yard("quota", "nope")
    assert r.code == 3, r
    job = client.submit({"name": "ck", "queue": "tiny", "project": "default",
                         "command": ["x"], "resources": {"gpus": 8, "cpus": 1, "memory": "1Gi"}})
    try:
        client.report_checkpoint(job, step=7, uri="/ck/step-7")
        r = yard("checkpoints", job.name.rsplit("/", 1)[-1])
        assert r.code == 0 and "/ck/step-7" in r.out and r.out.splitlines()[1].split()[0] == "7"
    finally:
        client.cancel(job)
    r = yard("whoami")
    assert r.code == 0 and r.out.startswith("users/demo") and "member" in r.out


def test_context_use_and_precedence(yard, stack, tmp_path):
    token_file = tmp_path / "demo.token"
    token_file.write_text(stack.tokens["demo"] + "\n")
    no_env = {"TRAINYARD_ADDR": None, "TRAINYARD_TOKEN": None}
    r = yard("context", "set", "local", "--target", stack.target, "--token-file", token_file,
             "--tenant", "demo", env=no_env)
    assert r.code == 0, r
    r = yard("context", "set", "broken", "--target", "127.0.0.1:1", "--token", "ty_x", env=no_env)
    assert r.code == 0, r
    r = yard("context", "use", "broken", env=no_env)
    assert r.code == 0
    r = yard("context", "current", env=no_env)
    assert r.out.strip() == "broken"
    r = yard("whoami", "--request-timeout", "2", env=no_env)
    assert r.code == 5, r  # the broken context is current
    r = yard("whoami", "--context", "local", env=no_env)
    assert r.code == 0 and "users/demo" in r.out, r
    r = yard("context", "use", "local", env=no_env)
    assert r.code == 0
    r = yard("whoami", env=no_env)
    assert r.code == 0 and "users/demo" in r.out, r
    r = yard("context", "list", env=no_env)
    assert r.code == 0 and any(line.startswith("*") and "local" in line
                               for line in r.out.splitlines())
    r = yard("context", "list", "-o", "json", env=no_env)
    assert json.loads(r.out)["contexts"]["broken"]["token"] == "<redacted>"
    r = yard("context", "use", "missing", env=no_env)
    assert r.code == 2 and "not found" in r.err
    # The environment wins over the current context (but not over --context).
    r = yard("whoami", env={"TRAINYARD_ADDR": "127.0.0.1:1", "TRAINYARD_TOKEN": None},
             timeout=60)
    assert r.code == 5, r


def _assert_total_is_the_rows_sum(r):
    """`yard cost -o json` succeeded and its total cost is the sum of its rows' costs."""
    assert r.code == 0, r
    report = json.loads(r.out)
    total = int(report.get("total", {}).get("cost", {}).get("micros", 0))
    assert total == sum(int(row.get("cost", {}).get("micros", 0))
                        for row in report.get("rows", []))


def test_cost_by_project_and_job_cost_columns(yard, stack):
    """`yard cost` prints the report's rows and a TOTAL whose cost is their sum; members may
    not read costs; `yard jobs` has a COST column."""
    r = yard("cost", "--by", "project,resource", "--all-tenants",
             env={"TRAINYARD_TOKEN": stack.tokens["admin"]})
    assert r.code == 0 and "TOTAL" in r.out and "PER GPU-HOUR" in r.out, r
    _assert_total_is_the_rows_sum(yard("cost", "-o", "json", "--all-tenants",
                                       env={"TRAINYARD_TOKEN": stack.tokens["admin"]}))
    # With the pools' idle cost: an IDLE column, and a total that is still the rows' sum;
    # shares cannot be grouped by user (refused, naming the field).
    r = yard("cost", "--by", "tenant,flavor", "--all-tenants", "--include-idle",
             env={"TRAINYARD_TOKEN": stack.tokens["admin"]})
    assert r.code == 0 and "IDLE" in r.out.splitlines()[1], r
    _assert_total_is_the_rows_sum(yard("cost", "-o", "json", "--by", "tenant,flavor",
                                       "--all-tenants", "--share-idle",
                                       env={"TRAINYARD_TOKEN": stack.tokens["admin"]}))
    r = yard("cost", "--by", "user", "--all-tenants", "--share-idle",
             env={"TRAINYARD_TOKEN": stack.tokens["admin"]})
    assert r.code == 2 and "share_idle" in r.err, r
    r = yard("cost")
    assert r.code == 4 and "PERMISSION_DENIED" in r.err, r
    r = yard("jobs")
    assert r.code == 0 and "COST" in r.out.splitlines()[0], r


def test_prices_prints_the_book_exactly(yard):
    """`yard prices` prints every rate of the book with its exact price and unit, and the
    latest spot price of each flavor: the rates of deploy/local/demo.textproto, written out
    by hand here."""
    want_rates = [["on-demand-h100", "gpu", "4.00", "USD", "GPU-hour"],
                  ["on-demand-h100", "cpu", "0.04", "USD", "CPU-hour"],
                  ["on-demand-h100", "memory", "0.005", "USD", "GiB-hour"],
                  ["spot-h100", "gpu", "4.00", "USD", "GPU-hour"],
                  ["spot-h100", "cpu", "0.015", "USD", "CPU-hour"],
                  ["spot-h100", "memory", "0.002", "USD", "GiB-hour"]]
    r = yard("prices")
    assert r.code == 0, r
    rates, spot = r.out.split("Spot prices", 1)
    rows = [line.split()[:5] for line in rates.splitlines()]
    for want in want_rates:
        assert want in rows, (want, r.out)
    # Every rate of the book has its row.
    book = json.loads(yard("prices", "-o", "json").out)
    assert len([row for row in rows if row and row[0] != "FLAVOR" and len(row) == 5]) \
        >= len(book["rates"]) >= len(want_rates), r.out
    assert ["spot-h100", "1.50", "USD"] in [line.split()[:3] for line in spot.splitlines()], r.out
    r = yard("prices", "--all")
    assert r.code == 0 and "every observation" not in r.out, r


def _submit_until_held(yard, tmp_path, project):
    """Submits a 30-second one-GPU job to `project` and waits (30 s at most) until `yard why`
    says BUDGET_HOLD; returns the job id and the last `yard why`."""
    spec = tmp_path / f"{project}.yaml"
    spec.write_text(JOB_YAML.format(name=f"{project}-job", queue="default", gpus=1)
                    .replace("project: default", f"project: {project}")
                    .replace("SIM_DURATION: 1s", "SIM_DURATION: 30s"))
    r = yard("submit", "-f", spec)
    assert r.code == 0, r
    job = r.out.split("submitted ", 1)[1].split()[0].rstrip(";").rsplit("/", 1)[-1]
    deadline = time.time() + 30
    why = None
    while time.time() < deadline:
        why = yard("why", job)
        if "BUDGET_HOLD" in why.out:
            break
        time.sleep(0.5)
    return job, why


def test_budget_holds_a_projects_work_until_raised(yard, stack, tmp_path):
    """A project budget of $0.01 with a HOLD threshold keeps a GPU job of the project QUEUED
    with BUDGET_HOLD (`yard why`), other projects unaffected; raising it lets the job start;
    bad input names the field; members may not set budgets."""
    admin = {"TRAINYARD_TOKEN": stack.tokens["admin"], "TRAINYARD_TENANT": "demo"}
    r = yard("budget", "set", "capped", "--project", "capped", "--amount", "0.01",
             "--threshold", "50:warn", "--threshold", "100:hold", env=admin)
    assert r.code == 0 and "tenants/demo/budgets/capped" in r.out, r
    r = yard("budget", "set", "capped", "--project", "capped", "--amount", "1",
             "--threshold", "100:hold", "--threshold", "50:warn", env=admin)
    assert r.code == 2 and "thresholds[1].percent" in r.err, r
    r = yard("budget", "set", "mine", "--amount", "1")
    assert r.code == 4 and "PERMISSION_DENIED" in r.err, r
    job, why = _submit_until_held(yard, tmp_path, "capped")
    assert why is not None and "BUDGET_HOLD" in why.out and "budgets/capped" in why.out, why
    r = yard("budgets", env=admin)
    assert r.code == 0 and "tenants/demo/budgets/capped" in r.out and "100%:hold" in r.out, r
    # Raised: the job is admitted.
    r = yard("budget", "set", "capped", "--project", "capped", "--amount", "100000",
             "--threshold", "100:hold", env=admin)
    assert r.code == 0, r
    deadline = time.time() + 30
    state = ""
    while time.time() < deadline:
        state = json.loads(yard("-o", "json", "get", job).out).get("state", "")
        if state not in ("JOB_STATE_QUEUED", ""):
            break
        time.sleep(0.5)
    assert state != "JOB_STATE_QUEUED", state
    yard("cancel", job)
    r = yard("budget", "delete", "capped", env=admin)
    assert r.code == 0, r


def test_user_hourly_cap_holds_a_users_work_until_raised(yard, stack, tmp_path):
    """A budget whose user hourly cap ($0.01/h) is below a GPU job's hourly price keeps the job
    QUEUED with BUDGET_HOLD naming the cap (`yard why`); `yard budgets` shows the cap; raising
    the cap alone (the amount and thresholds kept) lets the job start; a negative cap is
    refused naming the field."""
    admin = {"TRAINYARD_TOKEN": stack.tokens["admin"], "TRAINYARD_TENANT": "demo"}
    r = yard("budget", "set", "ratecap", "--project", "ratecap", "--amount", "100000",
             "--user-hourly-cap", "0.01", env=admin)
    assert r.code == 0 and "tenants/demo/budgets/ratecap" in r.out \
        and "0.01 an hour per user" in r.out, r
    r = yard("budget", "set", "ratecap", "--project", "ratecap", "--amount", "100000",
             "--user-hourly-cap", "-1", env=admin)
    assert r.code != 0 and "--user-hourly-cap" in r.err, r
    job, why = _submit_until_held(yard, tmp_path, "ratecap")
    assert why is not None and "hourly spend cap of 0.010000/h" in why.out \
        and "budgets/ratecap" in why.out, why
    r = yard("budgets", env=admin)
    assert r.code == 0 and "USER CAP" in r.out \
        and ("0.01 USD/h" in r.out or "0.01/h" in r.out), r
    r = yard("budget", "set", "ratecap", "--project", "ratecap", "--amount", "100000",
             "--user-hourly-cap", "100000", env=admin)
    assert r.code == 0, r
    deadline = time.time() + 30
    state = ""
    while time.time() < deadline:
        state = json.loads(yard("-o", "json", "get", job).out).get("state", "")
        if state not in ("JOB_STATE_QUEUED", ""):
            break
        time.sleep(0.5)
    assert state != "JOB_STATE_QUEUED", state
    yard("cancel", job)
    r = yard("budget", "delete", "ratecap", env=admin)
    assert r.code == 0, r


def test_watch_prints_a_budget_notice():
    """A budget threshold event (no job) prints as the budget and its reason."""
    from trainyard import job_pb2
    from trainyard.cli import _event_line
    ev = job_pb2.JobEvent(sequence=7, type=job_pb2.JOB_EVENT_TYPE_BUDGET_THRESHOLD,
                          tenant="demo", budget="tenants/demo/budgets/capped",
                          reason="BUDGET_HOLD", message="reached 100%")
    ev.time.FromSeconds(1_795_000_000)
    line = _event_line(ev)
    assert "#7" in line and "budget tenants/demo/budgets/capped" in line, line
    assert "BUDGET_HOLD" in line and "(reached 100%)" in line and "job" not in line, line


def _decimal_micros(text: str) -> int:
    """"12.345678" (exact decimal text of currency units) as integer micros."""
    from decimal import Decimal
    micros = Decimal(text) * 1_000_000
    assert micros == micros.to_integral_value(), text
    return int(micros)


def test_invoice_total_equals_cost_of_the_month(yard, stack, tmp_path):
    """`yard invoice` prints a line per project, flavor and resource and a TOTAL that equals
    what `yard cost` reports billed for the same month; -o csv and -o json carry the same
    total; a bad month names the field; members may not read invoices."""
    import datetime as _dt
    admin = {"TRAINYARD_TOKEN": stack.tokens["admin"], "TRAINYARD_TENANT": "demo"}
    month = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m")
    r = yard("submit", "-f", write_job(tmp_path, "invoiced", gpus=2), "--wait",
             "--timeout", "60")
    assert r.code == 0, r

    def invoice_total():
        r = yard("invoice", "--month", month, env=admin)
        assert r.code == 0, r
        totals = [line for line in r.out.splitlines() if line.startswith("TOTAL")]
        assert len(totals) == 1, r
        return r, _decimal_micros(totals[0].split()[1])

    def billed_by_cost():
        r = yard("cost", "--period", month, "-o", "json", env=admin)
        assert r.code == 0, r
        total = json.loads(r.out).get("total", {})
        return int(total.get("tenant_cost", {}).get("micros", 0))

    # The meter runs every second: read until two invoices around `yard cost` agree.
    deadline = time.time() + 60
    while True:
        out, before = invoice_total()
        billed = billed_by_cost()
        _, after = invoice_total()
        if (before == after and before > 0) or time.time() > deadline:
            break
        time.sleep(1)
    assert before == after == billed > 0, (before, after, billed)
    assert f"INV-demo-{month.replace('-', '')}" in out.out and "DRAFT" in out.out, out
    assert "PROJECT" in out.out and "/GPU" in out.out and "GPU-Hours" in out.out, out

    # JSON: the lines add up to the total exactly.
    r = yard("invoice", "--month", month, "-o", "json", env=admin)
    assert r.code == 0, r
    inv = json.loads(r.out)
    lines = sum(int(line.get("cost", {}).get("micros", 0)) for line in inv.get("lines", []))
    assert lines == int(inv["total"]["micros"]), inv
    assert inv["name"] == f"tenants/demo/invoices/{month}" and inv["status"] == "INVOICE_STATUS_DRAFT"
    # CSV: a row per line, then the TOTAL row.
    r = yard("invoice", "--month", month, "-o", "csv", env=admin)
    assert r.code == 0, r
    import csv as _csv
    import io
    rows = list(_csv.DictReader(io.StringIO(r.out)))
    assert rows[-1]["project"] == "TOTAL" and len(rows) == len(inv["lines"]) + 1, r.out
    # (Other tests' jobs may still accrue between the two reads: each output is checked
    # on its own.)
    assert sum(_decimal_micros(row["cost"]) for row in rows[:-1]) == \
        _decimal_micros(rows[-1]["cost"]) > 0, r.out

    r = yard("invoice", "--month", "2026-13", env=admin)
    assert r.code == 2 and "name" in r.err and "01 to 12" in r.err, r
    r = yard("invoice", "--month", month)
    assert r.code == 4 and "PERMISSION_DENIED" in r.err, r


def test_logs_of_an_attempt_and_follow(yard, tmp_path):
    # A finished job: the sim's output of its one attempt is its events, one line each.
    r = yard("submit", "-f", write_job(tmp_path, "cli-logs"), "--wait", "--timeout", "60", "-q")
    assert r.code == 0, r
    job_id = r.out.split("submitted ", 1)[1].split(";", 1)[0].rsplit("/", 1)[-1]
    out = yard("logs", job_id)
    assert out.code == 0, out
    lines = out.out.splitlines()
    assert [ln.split()[1] for ln in lines] == ["LAUNCHED", "STARTED", "SUCCEEDED"], out.out
    assert all(ln.split()[2] == f"ty-{job_id}-1" for ln in lines), out.out
    data = json.loads(yard("logs", job_id, "--attempt", "1", "-o", "json").out)
    assert data["complete"] is True and data["attempt"] == 1
    assert data["backend_job_name"] == f"ty-{job_id}-1"
    assert int(data["end_offset"]) == len(out.out.encode())
    # Bad input names its field.
    bad = yard("logs", job_id, "--attempt", "9")
    assert bad.code == 2 and "attempt" in bad.err, bad

    # --follow from before the job starts until its output is complete.
    path = write_job(tmp_path, "cli-follow").read_text().replace("SIM_DURATION: 1s",
                                                                   "SIM_DURATION: 4s")
    (tmp_path / "follow.yaml").write_text(path)
    sub = yard("submit", "-f", tmp_path / "follow.yaml", "-o", "json")
    assert sub.code == 0, sub
    follow_id = json.loads(sub.out)[0]["name"].rsplit("/", 1)[-1]
    f = yard("logs", follow_id, "-f", "--timeout", "60")
    assert f.code == 0, f
    assert [ln.split()[1] for ln in f.out.splitlines()] == ["LAUNCHED", "STARTED", "SUCCEEDED"], \
        f.out
    assert f.out == yard("logs", follow_id).out
