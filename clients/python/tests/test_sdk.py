"""trainyard.Client against the live stack."""

from __future__ import annotations

import datetime
import threading
import time
import uuid

import grpc
import pytest

import trainyard
from trainyard import JobSpec, Resources, job_pb2
from trainyard.v1 import common_pb2
from proxy import Proxy

QUICK = {"queue": "default", "project": "default", "command": ["python3", "train.py"],
         "resources": {"gpus": 1, "cpus": 4, "memory": "16Gi"}, "time_limit": "10m"}


def quick(**over):
    d = {**QUICK, **over}
    d["resources"] = {"cpus": 1, "memory": "1Gi", **d["resources"]}
    d.setdefault("env", {"SIM_DURATION": "1s"})
    return d


def test_submit_dict_and_wait_until_succeeded(client):
    job = client.submit(quick(name="sdk-dict", labels={"team": "nlp"}))
    assert job.name.startswith("tenants/demo/jobs/")
    assert job.state == job_pb2.JOB_STATE_QUEUED
    seen = []
    done = client.wait(job, timeout=60, on_event=lambda e: seen.append(e.to_state))
    assert done.state == job_pb2.JOB_STATE_SUCCEEDED
    assert done.labels["team"] == "nlp"
    assert len(done.attempts) == 1 and done.attempts[0].backend_job_name.startswith("ty-")
    assert job_pb2.JOB_STATE_RUNNING in seen and seen[-1] == job_pb2.JOB_STATE_SUCCEEDED


def test_submit_dataclass_pending_explain_and_cancel(client):
    spec = JobSpec(name="sdk-dataclass", queue="tiny", project="default", workers=1,
                   resources=Resources(gpus=8, gpu_model="H100", cpus=8, memory="64Gi"),
                   command=["python3", "big.py"], time_limit="1h")
    first = client.submit(spec)
    second = client.submit(spec)
    try:
        # Neither fits the 1-GPU quota of queue tiny: both stay QUEUED with a reason.
        deadline = time.time() + 20
        why = client.explain_pending(second)
        while why.reason in ("", "AWAITING_SCHEDULER") and time.time() < deadline:
            time.sleep(0.3)
            why = client.explain_pending(second)
        assert why.state == job_pb2.JOB_STATE_QUEUED
        assert why.reason not in ("", "AWAITING_SCHEDULER", "NOT_PENDING"), why
        assert why.message
        assert why.queue_length >= 2
        assert why.position_in_queue == client.explain_pending(first).position_in_queue + 1
    finally:
        cancelled = client.cancel(second, reason="test over")
        client.cancel(first)
    assert cancelled.state == job_pb2.JOB_STATE_CANCELLED
    assert client.get(second).state_reason == "CANCELLED_BY_USER"
    # Cancel is idempotent.
    assert client.cancel(second).state == job_pb2.JOB_STATE_CANCELLED
    # A job that is not pending says so.
    assert client.explain_pending(second).reason == "NOT_PENDING"


def test_submit_yaml_file_many_and_list_all_pages(client, tmp_path):
    job_set = f"set-{uuid.uuid4().hex[:8]}"
    docs = "\n---\n".join(
        f"name: many-{i}\nqueue: tiny\nproject: default\njob_set: {job_set}\n"
        f"command: [python3, t.py]\nresources: {{gpus: 8, cpus: 1, memory: 1Gi}}\n"
        for i in range(5))
    path = tmp_path / "jobs.yaml"
    path.write_text(docs)
    specs = trainyard.specs_from_file(path)
    assert [s.name for s in specs] == [f"many-{i}" for i in range(5)]
    jobs = client.submit_many(specs)
    assert [j.display_name for j in jobs] == [f"many-{i}" for i in range(5)]
    try:
        listed = list(client.list(job_set=job_set, page_size=2))
        # Newest first, every page, nothing twice.
        assert [j.name for j in listed] == [j.name for j in reversed(jobs)]
        queued = list(client.list(job_set=job_set, states=["queued"], page_size=3))
        assert len(queued) == 5
        assert list(client.list(job_set=job_set, states=["succeeded"])) == []
        one = tmp_path / "one.yaml"
        one.write_text(f"name: from-file\nqueue: tiny\nproject: default\njob_set: {job_set}\n"
                       "command: python3 t.py\nresources: {gpus: 8, cpus: 1, memory: 1Gi}\n")
        from_file = client.submit(str(one))
        assert list(from_file.spec.command) == ["/bin/sh", "-c", "python3 t.py"]
        assert len(list(client.list(job_set=job_set, page_size=1))) == 6
    finally:
        for j in client.list(job_set=job_set):
            client.cancel(j)


def test_submit_is_idempotent_by_request_id(client):
    rid = f"rid-{uuid.uuid4().hex}"
    a = client.submit(quick(name="idem", queue="tiny", resources={"gpus": 8}),
                      client_request_id=rid, return_response=True)
    b = client.submit(quick(name="idem", queue="tiny", resources={"gpus": 8}),
                      client_request_id=rid, return_response=True)
    assert a.job.name == b.job.name
    assert not a.deduplicated and b.deduplicated
    with pytest.raises(trainyard.AlreadyExists) as e:
        client.submit(quick(name="different", queue="tiny", resources={"gpus": 8}),
                      client_request_id=rid)
    assert e.value.code == grpc.StatusCode.ALREADY_EXISTS
    client.cancel(a.job)


def test_server_errors_carry_code_and_field(client):
    with pytest.raises(trainyard.InvalidArgument) as e:
        client.submit(quick(queue="no-such-queue"))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.field == "job.spec.queue"
    assert "no-such-queue" in e.value.message
    with pytest.raises(trainyard.InvalidArgument) as e:
        client.submit(quick(command=[], image=""))
    assert e.value.field == "job.spec.command"
    with pytest.raises(trainyard.NotFound) as e:
        client.get("999999")
    assert e.value.code == grpc.StatusCode.NOT_FOUND


def test_client_side_spec_errors_name_the_field(client):
    with pytest.raises(trainyard.JobSpecError) as e:
        client.submit(quick(resources={"gpus": 1, "gpuz": 2}))
    assert e.value.field == "resources.gpuz"
    assert "unknown field 'gpuz'" in str(e.value)
    with pytest.raises(trainyard.JobSpecError) as e:
        trainyard.specs_from_yaml("name: x\nqueue: q\nworkers: 1\nspto: required\n", "job.yaml")
    assert e.value.field == "spto" and e.value.line == 4
    assert str(e.value).startswith("job.yaml:4: spto: unknown field")
    with pytest.raises(trainyard.JobSpecError) as e:
        trainyard.specs_from_yaml("name: x\nresources:\n  gpus: [1\n  cpus: 2\n", "bad.yaml")
    assert e.value.line is not None and e.value.line >= 3
    assert "invalid YAML" in str(e.value) and f"bad.yaml:{e.value.line}:" in str(e.value)
    with pytest.raises(trainyard.JobSpecError) as e:
        trainyard.specs_from_yaml("name: x\ntime_limit: soon\n")
    assert e.value.field == "time_limit" and e.value.line == 2
    with pytest.raises(trainyard.JobSpecError) as e:
        trainyard.specs_from_yaml("name: x\nname: y\n")
    assert "duplicate key" in str(e.value) and e.value.line == 2


def test_expired_and_bad_tokens_are_unauthenticated(stack):
    time.sleep(max(0.0, stack.expired_at + 0.5 - time.time()))
    with trainyard.Client(stack.target, stack.tokens["expired"], tenant="demo") as c:
        with pytest.raises(trainyard.Unauthenticated) as e:
            list(c.list())
        assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    with trainyard.Client(stack.target, "ty_not_a_token", tenant="demo") as c:
        with pytest.raises(trainyard.Unauthenticated):
            c.whoami()
    with trainyard.Client(stack.target, stack.tokens["viewer"]) as c:
        assert c.tenant == "demo"  # the token's only tenant, from WhoAmI
        with pytest.raises(trainyard.PermissionDenied) as e:
            c.submit(quick())
        assert "member" in e.value.message


def test_all_tenants_needs_visibility(stack, client, admin):
    with trainyard.Client(stack.target, stack.tokens["other"]) as other:
        theirs = other.submit(quick(name="other-job", queue="default"))
    mine = client.submit(quick(name="mine", queue="tiny", resources={"gpus": 8}))
    try:
        every = {j.name for j in admin.list(all_tenants=True, page_size=50)}
        assert theirs.name in every and mine.name in every
        visible = {j.name for j in client.list(all_tenants=True)}
        assert mine.name in visible and theirs.name not in visible
        with pytest.raises(trainyard.NotFound):
            client.get(theirs.name)
    finally:
        client.cancel(mine)


def test_queues_quota_and_usage(client):
    names = {q.name for q in client.queues()}
    assert {"tenants/demo/queues/default", "tenants/demo/queues/tiny",
            "tenants/demo/queues/flaky"} <= names
    rows = client.quota("default")
    gpu = [r for r in rows if r["flavor"] == "on-demand-h100" and r["resource"] == "GPU"]
    assert gpu and gpu[0]["nominal"] == 16 and gpu[0]["borrowing_limit"] is None
    job = client.submit(quick(name="usage", env={"SIM_DURATION": "30s"},
                              resources={"gpus": 2, "cpus": 4, "memory": "16Gi"}))
    try:
        deadline = time.time() + 30
        running = 0
        while time.time() < deadline and running < 1:
            running = client.queue_status("default").jobs_by_state.get("RUNNING", 0)
            time.sleep(0.3)
        assert running >= 1
        # QueueStatus.usage is not published by the server yet (queue_service.cc leaves
        # it to the scheduler), so usage() can only be checked for shape here.
        for u in client.usage("default"):
            assert u.flavor and u.used >= 0
    finally:
        client.cancel(job)


def test_report_checkpoint_and_list(client):
    job = client.submit(quick(name="ckpt", queue="tiny", resources={"gpus": 8}))
    try:
        client.report_checkpoint(job, step=10, uri="/ckpt/a/step-10", metadata={"loss": "1.5"})
        client.report_checkpoint(job, step=20, uri="/ckpt/a/step-20")
        cps = list(client.checkpoints(job, page_size=1))
        assert [c.step for c in cps] == [20, 10]
        assert cps[1].metadata["loss"] == "1.5"
        assert client.get(job).resume_from == "/ckpt/a/step-20"
        with pytest.raises(trainyard.InvalidArgument) as e:
            client.report_checkpoint(job, step=-1, uri="/x")
        assert e.value.field == "checkpoint.step"
    finally:
        client.cancel(job)


def test_accounting_prices_metering_and_reports(client, admin):
    """Rates from the start of this month, a job run, its usage metered by the meter of
    `trainyard all` (every second in the test stack) into lines whose GPU cost is the job's
    GPU time at $2/GPU-hour, and a report whose rows add up to its total."""
    now = datetime.datetime.now(datetime.timezone.utc)
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    with pytest.raises(trainyard.PermissionDenied):
        client.add_rate("flaky-spot-h100", "gpu", 2_000_000, month_start)
    # The demo bundle priced on-demand-h100 ($4/GPU-h) and spot-h100 (spot $1.50/GPU-h)
    # from the stack's start; the test bundle's flaky pool gets $2 from the month's start.
    for resource, micros in (("gpu", 2_000_000), ("cpu", 40_000), ("memory", 5_000)):
        admin.add_rate("flaky-spot-h100", resource, micros, month_start)
    with pytest.raises(trainyard.InvalidArgument) as e:
        admin.add_rate("flaky-spot-h100", "gpu", -1, month_start + datetime.timedelta(hours=1))
    assert e.value.field == "rate.price_per_unit_hour.micros"
    book = client.price_book()
    assert len(book.rates) == 9 and book.rates[0].price_per_unit_hour.currency_code == "USD"
    gpu_price = {"on-demand-h100": 4_000_000, "spot-h100": 1_500_000,
                 "flaky-spot-h100": 2_000_000}

    job = client.submit(quick(name="metered"))
    done = client.wait(job, timeout=60)
    assert done.state == job_pb2.JOB_STATE_SUCCEEDED
    attempt = done.attempts[0]
    gpu_ms = attempt.end_time.ToMilliseconds() - attempt.start_time.ToMilliseconds()
    deadline = time.time() + 30
    lines = []
    while time.time() < deadline:
        lines = list(admin.usage_records(job=job))
        if lines and not any(r.open for r in lines):
            break
        time.sleep(0.5)
    gpu = [r for r in lines if r.resource == common_pb2.RESOURCE_NAME_GPU]
    assert gpu, lines
    price = gpu_price[attempt.flavor.rsplit("/", 1)[-1]]
    assert all(r.unit_price.micros == price for r in gpu), gpu
    # Each line is rounded half-even on its own: at most half a micro off per line.
    expected = price * gpu_ms / 3_600_000
    assert abs(sum(r.cost.micros for r in gpu) - expected) <= len(gpu), (gpu, expected)
    assert sum(r.amount * (r.end_time.ToMilliseconds() - r.start_time.ToMilliseconds())
               for r in gpu) == gpu_ms

    # The job's cost: its lines' sum, final once the job ended and its attempt is metered.
    cost = client.get(job).cost
    assert cost.final and cost.spent.micros == sum(r.cost.micros for r in lines), cost
    assert cost.spent.currency_code == "USD"

    with pytest.raises(trainyard.PermissionDenied):
        client.report(period=now.strftime("%Y-%m"), group_by=["project"])
    report = admin.report(period=now.strftime("%Y-%m"), group_by=["project", "resource"])
    assert report.currency == "USD"
    assert report.total.cost.micros == sum(r.cost.micros for r in report.rows)
    assert report.total.cost.micros >= sum(r.cost.micros for r in lines)
    with pytest.raises(trainyard.InvalidArgument) as e:
        client.report(period="2026-13")
    assert e.value.field == "period"


def test_watch_resumes_after_dropped_connection(stack, client):
    """Cut the TCP connection under a Watch twice: every event arrives exactly once."""
    proxy = Proxy(stack.grpc_port)
    job_set = f"watch-{uuid.uuid4().hex[:8]}"
    got = []
    try:
        with trainyard.Client(proxy.target, stack.tokens["demo"], tenant="demo") as via_proxy:
            w = via_proxy.watch(job_set=job_set, from_start=True)
            collector_done = threading.Event()

            def collect():
                try:
                    for ev in w:
                        got.append(ev)
                finally:
                    collector_done.set()

            t = threading.Thread(target=collect, daemon=True)
            t.start()
            jobs = []
            for round_ in range(3):
                for i in range(4):
                    jobs.append(client.submit(quick(name=f"w{round_}-{i}", queue="tiny",
                                                    job_set=job_set, resources={"gpus": 8})))
                for j in jobs[-4:-2]:
                    client.cancel(j)
                if round_ < 2:
                    time.sleep(0.5)
                    assert proxy.cut() >= 1
            for j in jobs:
                client.cancel(j)
            # Ground truth: the server's history of this job set, read directly.
            truth = []
            for ev in client.watch(job_set=job_set, from_start=True, timeout=3):
                truth.append(ev)
            deadline = time.time() + 20
            while len(got) < len(truth) and time.time() < deadline:
                time.sleep(0.1)
            w.cancel()
            collector_done.wait(5)
        seqs = [e.sequence for e in got]
        assert len(truth) == 12 * 2  # SUBMITTED + CANCELLED per job
        assert seqs == [e.sequence for e in truth]
        assert len(set(seqs)) == len(seqs)
        assert w.reconnects >= 2
        assert proxy.accepted >= 3
    finally:
        proxy.close()


def test_wait_times_out(client):
    job = client.submit(quick(name="slow", queue="tiny", resources={"gpus": 8}))
    try:
        start = time.time()
        with pytest.raises(trainyard.WaitTimeout) as e:
            client.wait(job, timeout=1.5)
        assert 1.4 <= time.time() - start < 10
        assert e.value.job.state == job_pb2.JOB_STATE_QUEUED
    finally:
        client.cancel(job)
