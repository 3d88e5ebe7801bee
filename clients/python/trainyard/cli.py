"""`yard`: the Trainyard command line, built on the Python SDK.

Exit codes (stable; scripts may rely on them):

  0  success
  1  unexpected error (a bug; the message says what happened)
  2  usage error or invalid input: bad arguments, unreadable/invalid job file (bad YAML,
     unknown field), INVALID_ARGUMENT from the server, bad configuration
  3  not found (NOT_FOUND)
  4  not allowed: UNAUTHENTICATED (missing, bad or expired token) or PERMISSION_DENIED
  5  temporary: UNAVAILABLE (server unreachable), DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED
     (rate limited), ABORTED (concurrent change) -- retrying may succeed
  6  a job ended unsuccessfully (FAILED or CANCELLED) under `submit --wait` / `wait`
  7  `--wait` / `wait` timed out before the job ended, `logs --follow` before the output did
  8  the server does not implement the feature (UNIMPLEMENTED, e.g. accounting)
  9  conflict: ALREADY_EXISTS or FAILED_PRECONDITION
  130 interrupted (Ctrl-C)
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_AUTH = 4
EXIT_RETRY = 5
EXIT_JOB_FAILED = 6
EXIT_TIMEOUT = 7
EXIT_UNIMPLEMENTED = 8
EXIT_CONFLICT = 9
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    pass


def _exit_code_for(err) -> int:
    import grpc

    from trainyard import errors
    if isinstance(err, (errors.JobSpecError, errors.ConfigError, UsageError)):
        return EXIT_USAGE
    if isinstance(err, errors.WaitTimeout):
        return EXIT_TIMEOUT
    if isinstance(err, errors.ApiError):
        c = err.code
        if c in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE):
            return EXIT_USAGE
        if c == grpc.StatusCode.NOT_FOUND:
            return EXIT_NOT_FOUND
        if c in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            return EXIT_AUTH
        if c in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                 grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED):
            return EXIT_RETRY
        if c == grpc.StatusCode.UNIMPLEMENTED:
            return EXIT_UNIMPLEMENTED
        if c in (grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.FAILED_PRECONDITION):
            return EXIT_CONFLICT
    return EXIT_ERROR


def _describe(err) -> str:
    import grpc

    from trainyard import errors
    if isinstance(err, errors.ApiError):
        text = f"{err.code.name}: {err.message}"
        if err.field and not err.message.startswith(err.field):
            text += f" (field {err.field})"
        if err.code == grpc.StatusCode.UNAVAILABLE:
            text += " -- is the server running? (address from --addr, TRAINYARD_ADDR or the context)"
        if err.code == grpc.StatusCode.UNAUTHENTICATED:
            text += " -- check the token (--token, TRAINYARD_TOKEN or the context)"
        if err.retry_delay:
            text += f" (retry in {err.retry_delay:g}s)"
        return text
    return str(err)


# --- helpers ---------------------------------------------------------------------------

def _client(args):
    import trainyard
    return trainyard.Client(target=args.addr, token=args.token, tenant=args.tenant,
                            context=args.context, tls=True if args.tls else None,
                            ca_file=args.ca_file, timeout=args.request_timeout)


def _short(job) -> str:
    return job.name.rsplit("/", 1)[-1]


def _job_row(job, with_tenant: bool):
    from trainyard import output, state_name
    spec = job.spec
    res = f"{spec.workers}x{spec.resources.gpus}"
    row = [_short(job)]
    if with_tenant:
        row.append(job.tenant)
    row += [job.display_name, spec.queue, state_name(job.state), res, job.attempt_count,
            _cost(job), output.age(job.create_time), job.state_reason]
    return row


def _job_headers(with_tenant: bool):
    h = ["ID"]
    if with_tenant:
        h.append("TENANT")
    return h + ["NAME", "QUEUE", "STATE", "GPUS", "ATTEMPTS", "COST", "AGE", "REASON"]


def _cost(job) -> str:
    """The job's metered cost, with "~" while it still accrues; before anything is metered,
    the scheduler's estimate as "est. X"; "" without accounting."""
    from trainyard import output
    if not job.HasField("cost"):
        return ""
    c = job.cost
    if not c.final and c.spent.micros == 0 and c.HasField("estimate"):
        return f"est. {output.money(c.estimate)}"
    text = output.money(c.spent)
    return text if c.final else f"~{text}"


def _print_jobs(args, jobs, with_tenant=False):
    from trainyard import output
    if args.output != "table":
        output.dump(list(jobs), args.output)
        return
    output.table(_job_headers(with_tenant), [_job_row(j, with_tenant) for j in jobs])


def _event_line(ev) -> str:
    from trainyard import job_pb2, output, state_name
    t = output.ts(ev.time)
    if ev.type == job_pb2.JOB_EVENT_TYPE_BUDGET_THRESHOLD:
        return "  ".join([t, f"#{ev.sequence}", f"budget {ev.budget}", ev.reason,
                          f"({ev.message})"])
    job = ev.job.rsplit("/", 1)[-1]
    if ev.type == job_pb2.JOB_EVENT_TYPE_CHECKPOINT_REPORTED:
        what = f"CHECKPOINT step={ev.checkpoint.step} {ev.checkpoint.uri}"
    elif ev.type == job_pb2.JOB_EVENT_TYPE_CANCEL_REQUESTED:
        what = "CANCEL_REQUESTED"
    elif ev.type == job_pb2.JOB_EVENT_TYPE_COST_UPDATED:
        what = "COST"
    else:
        what = state_name(ev.to_state)
        if ev.from_state:
            what = f"{state_name(ev.from_state)} -> {what}"
    parts = [t, f"#{ev.sequence}", f"job {job}", what]
    if ev.attempt:
        parts.append(f"attempt {ev.attempt}")
    if ev.reason and ev.type != job_pb2.JOB_EVENT_TYPE_CHECKPOINT_REPORTED:
        parts.append(ev.reason)
    if ev.message:
        parts.append(f"({ev.message})")
    return "  ".join(parts)


def _emit_event(args, ev):
    from trainyard import output
    if args.output == "table":
        print(_event_line(ev), flush=True)
    elif args.output == "json":
        import json
        print(json.dumps(output.to_plain(ev)), flush=True)  # one object per line
    else:
        output.dump([ev], "yaml")
        sys.stdout.flush()


# --- commands --------------------------------------------------------------------------

def cmd_submit(args):
    import trainyard
    from trainyard import output, state_name
    specs = []
    for f in args.file:
        specs.extend(trainyard.specs_from_file(f))
    for s in specs:
        if args.queue:
            s.queue = args.queue
        if args.project:
            s.project = args.project
    with _client(args) as c:
        if len(specs) == 1:
            jobs = [c.submit(specs[0], client_request_id=args.request_id)]
        else:
            if args.request_id:
                raise UsageError("--request-id applies to a file with one job")
            jobs = c.submit_many(specs)
        if not args.wait:
            if args.output == "table":
                for j in jobs:
                    print(f"submitted {j.name} ({state_name(j.state)})")
            else:
                output.dump(jobs, args.output)
            return EXIT_OK
        if args.output == "table":
            for j in jobs:
                print(f"submitted {j.name}; waiting", flush=True)
        done = []
        for j in jobs:
            on_event = (lambda ev: print(_event_line(ev), flush=True)) \
                if (args.output == "table" and not args.quiet) else None
            done.append(c.wait(j, timeout=args.timeout, on_event=on_event))
        if args.output == "table":
            for j in done:
                print(f"{j.name} {state_name(j.state)} {j.state_reason}".rstrip())
        else:
            output.dump(done, args.output)
        failed = [j for j in done if j.state != trainyard.job_pb2.JOB_STATE_SUCCEEDED]
        return EXIT_JOB_FAILED if failed else EXIT_OK


def cmd_get(args):
    from trainyard import output, state_name
    from trainyard.v1 import job_pb2
    with _client(args) as c:
        job = c.get(args.job, full=True)
    if args.output != "table":
        output.dump(job, args.output)
        return EXIT_OK
    s = job.spec
    pairs = [("Name", job.name), ("Display name", job.display_name),
             ("State", state_name(job.state)), ("Reason", job.state_reason),
             ("Message", job.state_message), ("Queue", s.queue), ("Project", s.project),
             ("Priority", f"{s.priority_class or 'default'} ({job.priority})"),
             ("Workers", s.workers),
             ("Resources", f"{s.resources.gpus} GPU {s.resources.gpu_model or 'any'}, "
                           f"{s.resources.cpu_millis / 1000:g} CPU, "
                           f"{s.resources.memory_bytes / 2**30:g} GiB per worker"),
             ("Spot", job_pb2.SpotPolicy.Name(s.spot_policy).replace("SPOT_POLICY_", "")),
             ("Created", output.ts(job.create_time)), ("Updated", output.ts(job.update_time)),
             ("Ended", output.ts(job.end_time)), ("Creator", job.creator),
             ("Attempts", job.attempt_count), ("Resume from", job.resume_from)]
    if job.HasField("cost"):
        c = job.cost
        spent = output.money(c.spent) if c.final else f"~{output.money(c.spent)}"
        pairs.append(("Cost", f"{spent} ({c.gpu_hours or '0'} GPU-hours, lost work "
                              f"{output.money(c.lost_work)})"
                              + ("" if c.final else ", accruing")))
        if c.HasField("estimate"):
            pairs.append(("Estimate", f"{output.money(c.estimate)} (the scheduler's expected "
                                      "cost of the current attempt)"))
    if s.job_set:
        pairs.append(("Job set", s.job_set))
    if job.labels:
        pairs.append(("Labels", ", ".join(f"{k}={v}" for k, v in sorted(job.labels.items()))))
    output.kv(pairs)
    if job.attempts:
        print()
        output.table(["ATTEMPT", "CLUSTER", "FLAVOR", "START", "END", "FAILURE", "EXIT",
                      "RESUMED FROM", "MESSAGE"],
                     [[a.index, a.cluster.rsplit("/", 1)[-1], a.flavor.rsplit("/", 1)[-1],
                       output.ts(a.start_time), output.ts(a.end_time),
                       job_pb2.FailureClass.Name(a.failure_class).replace("FAILURE_CLASS_", "")
                       if a.failure_class else "", a.exit_code if a.end_time.seconds else "",
                       a.resumed_from, a.message] for a in job.attempts])
    return EXIT_OK


def _utc_time(text: str):
    """An RFC 3339 time (``Z`` or an offset; a time without one is UTC) as an aware datetime."""
    import datetime as _dt
    try:
        t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an RFC 3339 time "
                                         "(e.g. 2026-11-28T09:00:00Z)") from None
    return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)


def cmd_jobs(args):
    with _client(args) as c:
        jobs = list(c.list(queue=args.queue or "", project=args.project or "",
                           states=args.state or (), job_set=args.job_set or "",
                           all_tenants=args.all_tenants, limit=args.limit,
                           user=args.user or "", created_after=args.created_after,
                           created_before=args.created_before, order_by=args.order_by or ""))
    _print_jobs(args, jobs, with_tenant=args.all_tenants)
    return EXIT_OK


def _each_job(args, verb: str, act, line):
    """Runs ``act(client, ref)`` on every job of ``args.jobs``, printing ``line(job)`` for each
    (table output) or dumping them all at the end; the exit code of the first failure."""
    from trainyard import output
    from trainyard.errors import TrainyardError
    worst = EXIT_OK
    results = []
    with _client(args) as c:
        for ref in args.jobs:
            try:
                job = act(c, ref)
                results.append(job)
                if args.output == "table":
                    print(line(job))
            except TrainyardError as e:
                print(f"yard: {verb} {ref}: {_describe(e)}", file=sys.stderr)
                worst = worst or _exit_code_for(e)
    if args.output != "table":
        output.dump(results, args.output)
    return worst


def cmd_cancel(args):
    from trainyard import state_name

    def line(job):
        note = " (cancel requested; stopping)" if job.cancel_requested and \
            state_name(job.state) != "CANCELLED" else ""
        return f"{job.name} {state_name(job.state)}{note}"
    return _each_job(args, "cancel", lambda c, ref: c.cancel(ref, reason=args.reason or ""),
                     line)


def _hold_or_release(args, hold: bool):
    from trainyard import state_name
    return _each_job(args, "hold" if hold else "release",
                     lambda c, ref: (c.hold if hold else c.release)(ref,
                                                                    reason=args.reason or ""),
                     lambda job: f"{job.name} {state_name(job.state)}")


def cmd_hold(args):
    return _hold_or_release(args, hold=True)


def cmd_release(args):
    return _hold_or_release(args, hold=False)


def cmd_watch(args):
    with _client(args) as c:
        if args.job is None and not (args.queue or args.job_set or args.all):
            raise UsageError("give a JOB, or --queue, --job-set or --all")
        w = c.watch(args.job, queue=args.queue or "", job_set=args.job_set or "",
                    all_tenants=args.all_tenants, from_start=not args.from_now,
                    after_sequence=args.after or 0, timeout=args.timeout)
        for ev in w:
            _emit_event(args, ev)
    return EXIT_OK


def cmd_wait(args):
    import trainyard
    from trainyard import output, state_name
    with _client(args) as c:
        on_event = (lambda ev: print(_event_line(ev), flush=True)) \
            if (args.output == "table" and not args.quiet) else None
        job = c.wait(args.job, timeout=args.timeout, on_event=on_event)
    if args.output == "table":
        print(f"{job.name} {state_name(job.state)} {job.state_reason}".rstrip())
    else:
        output.dump(job, args.output)
    return EXIT_OK if job.state == trainyard.job_pb2.JOB_STATE_SUCCEEDED else EXIT_JOB_FAILED


def cmd_why(args):
    from trainyard import output, state_name
    with _client(args) as c:
        r = c.explain_pending(args.job)
        name = c.job_name(args.job)
    if args.output != "table":
        output.dump(r, args.output)
        return EXIT_OK
    pairs = [("Job", name), ("State", state_name(r.state)), ("Reason", r.reason),
             ("Message", r.message)]
    if r.queue_length:
        pairs.append(("Position", f"{r.position_in_queue} of {r.queue_length} pending in its queue"))
    pairs.append(("Evaluated", output.ts(r.evaluate_time) or "not yet"))
    output.kv(pairs)
    return EXIT_OK


def cmd_logs(args):
    import trainyard
    from trainyard import output
    with _client(args) as c:
        if args.output != "table":
            output.dump(c.logs(args.job, args.attempt), args.output)
            return EXIT_OK
        pieces = c.follow_logs(args.job, args.attempt, timeout=args.timeout) if args.follow \
            else iter([c.logs(args.job, args.attempt)])
        first = True
        try:
            for r in pieces:
                if first and r.start_offset > 0:
                    print(f"(the first {r.start_offset} bytes of attempt {r.attempt}'s output are "
                          "not kept)", file=sys.stderr)
                first = False
                sys.stdout.write(r.text)
                sys.stdout.flush()
                if r.unavailable_reason and not r.text:
                    print(f"no output: {r.unavailable_reason}", file=sys.stderr)
        except trainyard.WaitTimeout as e:
            print(f"yard: {e}", file=sys.stderr)
            return EXIT_TIMEOUT
    return EXIT_OK


def cmd_queues(args):
    from trainyard import output
    with _client(args) as c:
        queues = list(c.queues())
        statuses = {q.name: c.queue_status(q.name) for q in queues}
    if args.output != "table":
        output.dump([{"queue": output.to_plain(q), "status": output.to_plain(statuses[q.name])}
                     for q in queues], args.output)
        return EXIT_OK
    rows = []
    for q in queues:
        st = statuses[q.name]
        gpu_used = sum(u.used for u in st.usage if u.resource == 1)
        gpu_nominal = sum(rq.nominal for fq in q.quotas for rq in fq.resources if rq.resource == 1)
        pending = st.jobs_by_state.get("QUEUED", 0) + st.jobs_by_state.get("HELD", 0)
        running = sum(v for k, v in st.jobs_by_state.items()
                      if k in ("ADMITTED", "DISPATCHING", "RUNNING", "PREEMPTING"))
        rows.append([q.name.rsplit("/", 1)[-1], q.cohort, f"{q.fair_share_weight:g}",
                     pending, running, f"{gpu_used}/{gpu_nominal}", f"{st.weighted_share:.2f}"])
    output.table(["QUEUE", "COHORT", "WEIGHT", "PENDING", "RUNNING", "GPUS USED/NOMINAL",
                  "SHARE"], rows)
    return EXIT_OK


def cmd_quota(args):
    from trainyard import output
    with _client(args) as c:
        rows = c.quota(args.queue)
    if args.output != "table":
        output.dump(rows, args.output)
        return EXIT_OK

    def fmt(resource, v):
        if v is None:
            return "unlimited"
        if resource == "MEMORY":
            return f"{v / 2**30:g}Gi"
        if resource == "CPU":
            return f"{v / 1000:g}"
        return str(v)

    output.table(["FLAVOR", "RESOURCE", "USED", "NOMINAL", "BORROWED", "BORROW LIMIT",
                  "LEND LIMIT"],
                 [[r["flavor"], r["resource"], fmt(r["resource"], r["used"]),
                   fmt(r["resource"], r["nominal"]), fmt(r["resource"], r["borrowed"]),
                   fmt(r["resource"], r["borrowing_limit"]), fmt(r["resource"], r["lending_limit"])]
                  for r in rows])
    return EXIT_OK


def cmd_checkpoints(args):
    from trainyard import output
    with _client(args) as c:
        cps = list(c.checkpoints(args.job))
    if args.output != "table":
        output.dump(cps, args.output)
        return EXIT_OK
    output.table(["STEP", "ATTEMPT", "WRITTEN", "URI"],
                 [[cp.step, cp.attempt, output.ts(cp.time), cp.uri] for cp in cps])
    return EXIT_OK


def cmd_report(args):
    from trainyard import output
    from trainyard.errors import Unimplemented
    fmt = args.format or ("table" if args.output == "table" else args.output)
    group_by = [g.strip() for g in args.group_by.split(",") if g.strip()]
    try:
        with _client(args) as c:
            if fmt in ("csv",):
                data = c.export_report(fmt="csv", period=args.period, group_by=group_by,
                                       project=args.project or "", queue=args.queue or "",
                                       all_tenants=args.all_tenants,
                                       include_idle=args.include_idle,
                                       share_idle=args.share_idle)
                sys.stdout.write(data.decode())
                return EXIT_OK
            report = c.report(period=args.period, group_by=group_by, project=args.project or "",
                              queue=args.queue or "", all_tenants=args.all_tenants,
                              include_idle=args.include_idle, share_idle=args.share_idle)
    except Unimplemented as e:
        raise Unimplemented(e.code, "accounting reports are not available: this server does "
                            "not run the AccountingService yet", method=e.method) from None
    if fmt in ("json", "yaml"):
        output.dump(report, fmt)
        return EXIT_OK
    headers = [g.upper() for g in group_by] + ["GPU-HOURS", "COST", "LOST WORK", "ATTEMPTS"]
    rows = [list(r.keys) + [f"{r.gpu_seconds / 3600:.2f}", output.money(r.cost),
                            output.money(r.lost_work_cost), r.attempts] for r in report.rows]
    t = report.total
    rows.append(["TOTAL"] + [""] * (len(group_by) - 1) +
                [f"{t.gpu_seconds / 3600:.2f}", output.money(t.cost),
                 output.money(t.lost_work_cost), t.attempts])
    output.table(headers, rows)
    return EXIT_OK


def cmd_cost(args):
    import datetime as _dt
    from trainyard import output
    period = args.period or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m")
    by = [g.strip() for g in args.by.split(",") if g.strip()]
    with _client(args) as c:
        report = c.report(period=period, group_by=by, project=args.project or "",
                          queue=args.queue or "", all_tenants=args.all_tenants,
                          include_idle=args.include_idle, share_idle=args.share_idle)
    if args.output != "table":
        output.dump(report, args.output)
        return EXIT_OK

    idle = args.include_idle or args.share_idle

    def cells(r):
        return [r.gpu_hours or "0", output.money(r.cost), output.money(r.lost_work_cost),
                output.money(r.effective_gpu_hour_price), r.attempts] + (
                    [output.money(r.idle_cost)] if idle else [])
    headers = [g.upper() for g in by] + ["GPU-HOURS", "COST", "LOST WORK", "PER GPU-HOUR",
                                        "ATTEMPTS"] + (["IDLE"] if idle else [])
    rows = [list(r.keys) + cells(r) for r in report.rows]
    rows.append(["TOTAL"] + [""] * (len(by) - 1) + cells(report.total))
    print(f"{period} ({report.currency})")
    output.table(headers, rows)
    return EXIT_OK


def _exact(m) -> str:
    """Money as exact decimal text of currency units, 2 to 6 decimals: "12.345678", "3.00"."""
    micros = int(m.micros)
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), 1_000_000)
    frac_text = f"{frac:06d}"
    while len(frac_text) > 2 and frac_text.endswith("0"):
        frac_text = frac_text[:-1]
    return f"{sign}{whole}.{frac_text}"


def cmd_invoice(args):
    """The tenant's invoice of a month: a line per project, flavor and resource, the total."""
    import csv as _csv
    from trainyard import output
    from trainyard.v1 import accounting_pb2, common_pb2
    with _client(args) as c:
        inv = c.invoice(args.month)
    if args.output in ("json", "yaml"):
        output.dump(inv, args.output)
        return EXIT_OK
    status = accounting_pb2.InvoiceStatus.Name(inv.status).replace("INVOICE_STATUS_", "")
    headers = ["PROJECT", "SKU", "QUANTITY", "UNIT", "COST", "LIST COST", "LOST WORK",
               "PLATFORM PAYS"]
    rows = [[line.project, line.sku, line.quantity, line.unit, _exact(line.cost),
             _exact(line.list_cost), _exact(line.lost_work_cost), _exact(line.platform_cost)]
            for line in inv.lines]
    total = ["TOTAL", "", "", "", _exact(inv.total), _exact(inv.list_cost),
             _exact(inv.lost_work_cost), _exact(inv.platform_cost)]
    if args.output == "csv":
        w = _csv.writer(sys.stdout, lineterminator="\r\n")
        w.writerow(["invoice_number", "tenant", "month", "status", "currency", "project",
                    "flavor", "resource", "sku", "quantity", "unit", "cost", "list_cost",
                    "lost_work_cost", "platform_cost"])
        head = [inv.invoice_number, inv.tenant, inv.month, status, inv.currency]
        for line in inv.lines:
            resource = common_pb2.ResourceName.Name(line.resource).replace("RESOURCE_NAME_", "")
            w.writerow(head + [line.project, line.flavor, resource, line.sku, line.quantity,
                               line.unit, _exact(line.cost), _exact(line.list_cost),
                               _exact(line.lost_work_cost), _exact(line.platform_cost)])
        w.writerow(head + ["TOTAL", "", "", "", "", ""] + total[4:])
        return EXIT_OK
    print(f"Invoice {inv.invoice_number}  {inv.name}  {status}  {inv.currency}  "
          f"{output.ts(inv.billing_period_start)} to {output.ts(inv.billing_period_end)}")
    output.table(headers, rows + [total])
    print(f"Total billed: {_exact(inv.total)} {inv.currency} (lost work the platform pays, "
          f"not billed: {_exact(inv.platform_cost)} {inv.currency})")
    return EXIT_OK


def _micros(text: str, what: str) -> int:
    """A decimal amount ("1000", "0.25") as integer micros, exactly."""
    from decimal import Decimal, InvalidOperation
    try:
        d = Decimal(text)
    except InvalidOperation:
        raise SystemExit(f"yard: {what}: not a decimal amount: {text!r}") from None
    micros = d * 1_000_000
    if micros != micros.to_integral_value() or micros < 0:
        raise SystemExit(f"yard: {what}: must be >= 0 with at most 6 decimals: {text!r}")
    return int(micros)


def _money_exact(m) -> str:
    """Money as its exact decimal amount and currency: "0.015 USD", "4.00 USD"."""
    return f"{_exact(m)} {m.currency_code}" if m.currency_code else ""


def cmd_prices(args):
    from trainyard import output
    from trainyard.v1 import common_pb2
    with _client(args) as c:
        book = c.price_book()
    if args.output != "table":
        output.dump(book, args.output)
        return EXIT_OK
    units = {"gpu": "GPU-hour", "cpu": "CPU-hour", "memory": "GiB-hour"}
    print(f"Rates ({book.currency or 'no prices yet'})")
    rows = []
    for r in book.rates:
        res = common_pb2.ResourceName.Name(r.resource).replace("RESOURCE_NAME_", "").lower()
        rows.append([r.flavor, res, _money_exact(r.price_per_unit_hour), units.get(res, res),
                     output.ts(r.effective_time)])
    output.table(["FLAVOR", "RESOURCE", "PRICE", "PER", "EFFECTIVE FROM"], rows)
    # Spot prices: the latest of each flavor, or every observation with --all.
    spot = list(book.spot_prices)
    if not args.all:
        latest = {}
        for p in spot:  # ascending by effective_time
            latest[p.flavor] = p
        spot = sorted(latest.values(), key=lambda p: p.flavor)
    print()
    print("Spot prices" + ("" if args.all else " (latest; --all for every observation)"))
    output.table(["FLAVOR", "PRICE PER GPU-HOUR", "EFFECTIVE FROM"],
                 [[p.flavor, _money_exact(p.gpu_hour_price), output.ts(p.effective_time)]
                  for p in spot])
    if book.commitments:
        print()
        print("Commitments")
        output.table(["FLAVOR", "AMOUNT", "FROM", "TO"],
                     [[m.flavor, _money_exact(m.amount), output.ts(m.start_time), output.ts(m.end_time)]
                      for m in book.commitments])
    return EXIT_OK


def cmd_budgets(args):
    from trainyard import output
    from trainyard.v1 import accounting_pb2
    with _client(args) as c:
        budgets = list(c.budgets(all_tenants=args.all_tenants))
    if args.output != "table":
        output.dump(budgets, args.output)
        return EXIT_OK

    def action(v):
        return accounting_pb2.BudgetAction.Name(v).replace("BUDGET_ACTION_", "").lower() \
            if v else ""
    def cap(m):
        if not m.micros:
            return "-"
        return f"{m.micros / 1e6:,.2f}{' ' + m.currency_code if m.currency_code else ''}/h"
    rows = [[b.name, b.project or "(tenant)", output.money(b.monthly_amount),
             output.money(b.spent), output.money(b.forecast), action(b.active_action) or "-",
             " ".join(f"{t.percent}%:{action(t.action) or 'warn'}" for t in b.thresholds),
             cap(b.user_hourly_cap)]
            for b in budgets]
    output.table(["NAME", "PROJECT", "MONTHLY", "SPENT", "FORECAST", "ACTION", "THRESHOLDS",
                  "USER CAP"], rows)
    return EXIT_OK


def cmd_budget(args):
    from trainyard import output
    with _client(args) as c:
        if args.budget_cmd == "delete":
            c.delete_budget(args.id)
            print(f"deleted budget {args.id}")
            return EXIT_OK
        thresholds = []
        for t in args.threshold or ["100:hold"]:
            percent, _, act = t.partition(":")
            if not percent.isdigit() or not act:
                raise SystemExit(f"yard: --threshold: expected PERCENT:ACTION, got {t!r}")
            thresholds.append((int(percent), act))
        cap = None
        if args.user_hourly_cap is not None:
            cap = _micros(args.user_hourly_cap, "--user-hourly-cap")
        b = c.set_budget(args.id, _micros(args.amount, "--amount"), thresholds,
                         project=args.project or "", currency=args.currency or "",
                         user_hourly_cap_micros=cap)
    if args.output != "table":
        output.dump(b, args.output)
    else:
        line = f"{b.name}: {output.money(b.monthly_amount)} a month"
        if b.user_hourly_cap.micros:
            line += f", at most {b.user_hourly_cap.micros / 1e6:,.2f} an hour per user"
        print(line)
    return EXIT_OK


def cmd_whoami(args):
    from trainyard import output
    from trainyard.v1 import admin_pb2
    with _client(args) as c:
        caller = c.whoami()
    if args.output != "table":
        output.dump(caller, args.output)
        return EXIT_OK
    print(caller.principal)
    output.table(["ROLE", "TENANT"],
                 [[admin_pb2.Role.Name(b.role).replace("ROLE_", "").lower(), b.tenant or "*"]
                  for b in caller.bindings])
    return EXIT_OK


def cmd_context(args):
    from trainyard import output
    from trainyard.config import ConfigFile
    from trainyard.errors import ConfigError
    cfg = ConfigFile.load()
    if args.context_cmd == "use":
        cfg.context(args.name)  # must exist
        cfg.current_context = args.name
        cfg.save()
        print(f"switched to context {args.name!r}")
    elif args.context_cmd == "set":
        ctx = dict(cfg.contexts.get(args.name, {}))
        for key, value in (("target", args.target), ("tenant", args.ctx_tenant),
                           ("ca-file", args.ctx_ca_file)):
            if value is not None:
                ctx[key] = value
        if args.token_file is not None:
            ctx.pop("token", None)
            ctx["token-file"] = str(Path(args.token_file).expanduser().resolve())
        if args.ctx_token is not None:
            ctx.pop("token-file", None)
            ctx["token"] = args.ctx_token
        if args.ctx_tls is not None:
            ctx["tls"] = args.ctx_tls == "true"
        cfg.contexts[args.name] = ctx
        if not cfg.current_context:
            cfg.current_context = args.name
        cfg.save()
        print(f"context {args.name!r} saved in {cfg.path}")
    elif args.context_cmd == "delete":
        cfg.context(args.name)
        del cfg.contexts[args.name]
        if cfg.current_context == args.name:
            cfg.current_context = ""
        cfg.save()
        print(f"deleted context {args.name!r}")
    elif args.context_cmd == "current":
        name = os.environ.get("TRAINYARD_CONTEXT") or cfg.current_context
        if not name:
            raise ConfigError(f"no current context (set one with `yard context use NAME`; "
                              f"config file {cfg.path})")
        print(name)
    else:  # list
        current = os.environ.get("TRAINYARD_CONTEXT") or cfg.current_context
        if args.output != "table":
            safe = {n: {k: ("<redacted>" if k == "token" else v) for k, v in c.items()}
                    for n, c in cfg.contexts.items()}
            output.dump({"current-context": current, "contexts": safe}, args.output)
            return EXIT_OK
        output.table(["CURRENT", "NAME", "TARGET", "TENANT", "TLS"],
                     [["*" if n == current else "", n, c.get("target", ""), c.get("tenant", ""),
                       "yes" if c.get("tls") else "no"] for n, c in sorted(cfg.contexts.items())])
    return EXIT_OK


# --- parser ----------------------------------------------------------------------------

def _positive_float(v):
    try:
        f = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {v!r}") from None
    if f <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {v!r}")
    return f


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"yard: error: {message}\n")


def _common(p, top: bool, outputs=("table", "json", "yaml")):
    d = None if top else argparse.SUPPRESS
    g = p.add_argument_group("connection and output")
    g.add_argument("--context", default=d, help="named context of the config file")
    g.add_argument("--addr", default=d, metavar="HOST:PORT",
                   help="API address (default: $TRAINYARD_ADDR, the context, 127.0.0.1:50051)")
    g.add_argument("--token", default=d, help="bearer token (default: $TRAINYARD_TOKEN or the context)")
    g.add_argument("--tenant", default=d, help="tenant (default: $TRAINYARD_TENANT, the context, "
                                               "or the token's only tenant)")
    g.add_argument("--tls", action="store_true", default=d if not top else False,
                   help="use TLS (system roots, or --ca-file)")
    g.add_argument("--ca-file", default=d, help="PEM file of the CA that signed the server")
    g.add_argument("--request-timeout", type=_positive_float, default=d if not top else 30.0,
                   metavar="SECONDS", help="deadline of each API call (default 30)")
    g.add_argument("-o", "--output", choices=outputs,
                   default=d if not top else "table", help="output format (default table)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="yard", description="Trainyard command line: submit, watch and inspect "
                "training jobs.", epilog=__doc__.split("\n", 2)[2],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(p, top=True)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name, func, help_, outputs=("table", "json", "yaml"), **kw):
        sp = sub.add_parser(name, help=help_, description=help_, **kw)
        _common(sp, top=False, outputs=outputs)
        sp.set_defaults(func=func)
        return sp

    sp = add("submit", cmd_submit, "submit the job(s) of a YAML file (several jobs: --- between)")
    sp.add_argument("-f", "--file", action="append", required=True, metavar="FILE",
                    help="job YAML file (docs/job-yaml.md); '-' reads stdin; repeatable")
    sp.add_argument("--wait", action="store_true", help="wait until the job(s) end; exit 6 "
                    "if one did not succeed")
    sp.add_argument("--timeout", type=_positive_float, metavar="SECONDS",
                    help="with --wait: give up after this long (exit 7)")
    sp.add_argument("--queue", help="override the queue of every job")
    sp.add_argument("--project", help="override the project of every job")
    sp.add_argument("--request-id", help="idempotency key (one job only)")
    sp.add_argument("-q", "--quiet", action="store_true", help="with --wait: no event lines")

    sp = add("get", cmd_get, "show a job and its attempts")
    sp.add_argument("job", metavar="JOB", help="job id (17) or name (tenants/T/jobs/17)")

    sp = add("jobs", cmd_jobs, "list jobs (newest first; every page)")
    sp.add_argument("--queue")
    sp.add_argument("--project")
    sp.add_argument("--user", help="only jobs this principal submitted (users/NAME or NAME)")
    sp.add_argument("--created-after", type=_utc_time, metavar="TIME",
                    help="only jobs created at or after TIME (RFC 3339, e.g. 2026-11-28T09:00:00Z)")
    sp.add_argument("--created-before", type=_utc_time, metavar="TIME",
                    help="only jobs created before TIME (RFC 3339)")
    sp.add_argument("--order-by", metavar="ORDER",
                    help='"create_time desc" (default), "priority desc", "display_name", '
                         '"state", "queue", "create_time"')
    sp.add_argument("--state", action="append", metavar="STATE",
                    help="only jobs in this state (queued, running, ...); repeatable")
    sp.add_argument("--job-set")
    sp.add_argument("--all-tenants", action="store_true",
                    help="jobs of every tenant you can read")
    sp.add_argument("--limit", type=int, help="at most this many jobs")

    sp = add("cancel", cmd_cancel, "cancel jobs")
    sp.add_argument("jobs", nargs="+", metavar="JOB")
    sp.add_argument("--reason", help="recorded in the job's event")

    sp = add("hold", cmd_hold, "hold queued jobs: not scheduled until released")
    sp.add_argument("jobs", nargs="+", metavar="JOB")
    sp.add_argument("--reason", help="recorded in the job's event")

    sp = add("release", cmd_release, "release held jobs: queued again, in their old place")
    sp.add_argument("jobs", nargs="+", metavar="JOB")
    sp.add_argument("--reason", help="recorded in the job's event")

    sp = add("watch", cmd_watch, "stream job events (a job: its history, then live until it ends)")
    sp.add_argument("job", nargs="?", metavar="JOB")
    sp.add_argument("--queue")
    sp.add_argument("--job-set")
    sp.add_argument("--all", action="store_true", help="every event of the tenant")
    sp.add_argument("--all-tenants", action="store_true")
    sp.add_argument("--from-now", action="store_true", help="skip the history")
    sp.add_argument("--after", type=int, metavar="SEQ", help="resume after this event sequence")
    sp.add_argument("--timeout", type=_positive_float, metavar="SECONDS",
                    help="stop watching after this long")

    sp = add("wait", cmd_wait, "wait until a job ends; exit 0 if it succeeded, 6 if not")
    sp.add_argument("job", metavar="JOB")
    sp.add_argument("--timeout", type=_positive_float, metavar="SECONDS",
                    help="give up after this long (exit 7)")
    sp.add_argument("-q", "--quiet", action="store_true", help="no event lines")

    sp = add("logs", cmd_logs, "an attempt's output (stdout and stderr), as the dispatcher "
             "copied it")
    sp.add_argument("job", metavar="JOB")
    sp.add_argument("--attempt", type=int, default=0, metavar="N",
                    help="attempt N (1-based); default: the newest")
    sp.add_argument("-f", "--follow", action="store_true",
                    help="keep printing new output until the attempt ends")
    sp.add_argument("--timeout", type=_positive_float, metavar="SECONDS",
                    help="with --follow: give up after this long (exit 7)")

    sp = add("why", cmd_why, "why a job is pending, and its position in its queue")
    sp.add_argument("job", metavar="JOB")

    add("queues", cmd_queues, "the tenant's queues with pending/running jobs and GPU usage")

    sp = add("quota", cmd_quota, "quota and usage of a queue per flavor and resource")
    sp.add_argument("queue", metavar="QUEUE")

    sp = add("checkpoints", cmd_checkpoints, "a job's checkpoints, newest first")
    sp.add_argument("job", metavar="JOB")

    sp = add("report", cmd_report, "usage and cost report (needs the accounting service)")
    sp.add_argument("--period", required=True, help="YYYY-MM (a month) or YYYY-MM-DD (a day)")
    sp.add_argument("--group-by", default="project",
                    help="comma-separated: tenant, project, queue, user, flavor, cluster, day, job")
    sp.add_argument("--format", choices=("csv", "json", "yaml", "table"),
                    help="default: the -o format")
    sp.add_argument("--project")
    sp.add_argument("--queue")
    sp.add_argument("--all-tenants", action="store_true")
    sp.add_argument("--include-idle", action="store_true",
                    help="add the pools' idle cost (rows of tenant __idle__)")
    sp.add_argument("--share-idle", action="store_true",
                    help="hand each pool's idle cost to its tenants by use")

    sp = add("cost", cmd_cost, "what was spent, by project, user or queue, over a window")
    sp.add_argument("--by", default="project",
                    help="comma-separated: project, user, queue, flavor, cluster, job, resource, "
                         "tenant, day (default project)")
    sp.add_argument("--period", help="YYYY-MM or YYYY-MM-DD (default: this month, UTC)")
    sp.add_argument("--project")
    sp.add_argument("--queue")
    sp.add_argument("--all-tenants", action="store_true")
    sp.add_argument("--include-idle", action="store_true",
                    help="add the pools' idle cost (rows of tenant __idle__)")
    sp.add_argument("--share-idle", action="store_true",
                    help="hand each pool's idle cost to its tenants by use")

    sp = add("prices", cmd_prices, "the price book: rates, spot prices and commitments")
    sp.add_argument("--all", action="store_true", help="every spot price observation")

    sp = add("invoice", cmd_invoice, "the tenant's invoice of a month: lines by project, "
             "flavor and resource, and the total billed (finance or tenant-admin)",
             outputs=("table", "json", "yaml", "csv"))
    sp.add_argument("--month", required=True, metavar="YYYY-MM", help="a UTC calendar month")

    sp = add("budgets", cmd_budgets, "budgets with this month's spend, forecast and action")
    sp.add_argument("--all-tenants", action="store_true")

    sp = add("budget", cmd_budget, "set or delete a monthly budget (finance or tenant-admin)")
    bsub = sp.add_subparsers(dest="budget_cmd", metavar="ACTION", parser_class=_Parser)
    bsub.required = True
    b = bsub.add_parser("set", help="create or replace budget ID")
    b.add_argument("id", metavar="ID")
    b.add_argument("--amount", required=True, help="monthly amount, e.g. 1000 or 2500.50")
    b.add_argument("--project", help="the project it limits (default: the whole tenant)")
    b.add_argument("--currency", help="ISO 4217 code (default: the price book's)")
    b.add_argument("--threshold", action="append", metavar="PERCENT:ACTION",
                   help="repeatable, ascending; ACTION warn, restrict_to_spot or hold "
                        "(default 100:hold)")
    b.add_argument("--user-hourly-cap", metavar="AMOUNT",
                   help="the most one user's running work in the scope may cost per hour, "
                        "e.g. 10 (0: no cap; default: unchanged, none for a new budget)")
    b = bsub.add_parser("delete", help="delete budget ID")
    b.add_argument("id", metavar="ID")

    add("whoami", cmd_whoami, "the principal of the token and its roles")

    sp = add("context", cmd_context, "manage named contexts of the config file "
             "($XDG_CONFIG_HOME/trainyard/config.yaml)")
    csub = sp.add_subparsers(dest="context_cmd", metavar="ACTION", parser_class=_Parser)
    c = csub.add_parser("use", help="make NAME the current context")
    c.add_argument("name", metavar="NAME")
    c = csub.add_parser("set", help="create or update context NAME")
    c.add_argument("name", metavar="NAME")
    c.add_argument("--target", help="API address HOST:PORT")
    c.add_argument("--token-file", help="file holding the token (stored as a path)")
    c.add_argument("--token", dest="ctx_token", help="the token itself (stored in the file)")
    c.add_argument("--tenant", dest="ctx_tenant")
    c.add_argument("--tls", dest="ctx_tls", choices=("true", "false"))
    c.add_argument("--ca-file", dest="ctx_ca_file")
    c = csub.add_parser("delete", help="delete context NAME")
    c.add_argument("name", metavar="NAME")
    csub.add_parser("list", help="list contexts")
    csub.add_parser("current", help="print the current context")
    for name, action in csub.choices.items():
        if name != "set":  # set has its own --token/--tenant/--tls/--ca-file (stored values)
            _common(action, top=False)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.command == "context" and not args.context_cmd:
        args.context_cmd = "list"
    try:
        import trainyard  # noqa: F401  (generates the API stubs on first use)
    except Exception as e:  # StubGenerationError, or a broken installation
        print(f"yard: cannot load the trainyard package: {e}", file=sys.stderr)
        return EXIT_ERROR
    from trainyard._stubs import StubGenerationError
    from trainyard.errors import TrainyardError
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except (TrainyardError, UsageError, StubGenerationError) as e:
        print(f"yard: {_describe(e)}", file=sys.stderr)
        return _exit_code_for(e)


def entry() -> None:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL) if hasattr(signal, "SIGPIPE") else None
    sys.exit(main())


if __name__ == "__main__":
    entry()
