"""``trainyard.Client``: the v1 gRPC API for people and scripts."""

from __future__ import annotations

import calendar
import datetime as _dt
import threading
import time
import uuid
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

import grpc

from trainyard import _stubs
from trainyard.config import Settings, resolve
from trainyard.errors import (ConfigError, InvalidArgument, NotFound, TrainyardError,
                              WaitTimeout, from_rpc_error)
from trainyard.spec import JobSpec, as_spec, to_job_proto

_stubs.ensure_stubs()

from trainyard.v1 import (accounting_pb2, accounting_pb2_grpc, admin_pb2, common_pb2,  # noqa: E402
                          admin_pb2_grpc, cluster_pb2, cluster_pb2_grpc, job_pb2,
                          job_pb2_grpc, queue_pb2, queue_pb2_grpc)

TERMINAL_STATES = frozenset({job_pb2.JOB_STATE_SUCCEEDED, job_pb2.JOB_STATE_FAILED,
                             job_pb2.JOB_STATE_CANCELLED})
PENDING_STATES = frozenset({job_pb2.JOB_STATE_QUEUED, job_pb2.JOB_STATE_HELD})

# Codes after which a Watch stream is opened again (from the last sequence seen).
_RECONNECT_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL,
                              grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED})


def state_name(state: int) -> str:
    """"RUNNING" for JOB_STATE_RUNNING."""
    return job_pb2.JobState.Name(state).replace("JOB_STATE_", "")


def parse_state(name: str) -> int:
    """JOB_STATE_RUNNING from "running", "RUNNING" or "JOB_STATE_RUNNING"."""
    key = name.strip().upper()
    if not key.startswith("JOB_STATE_"):
        key = "JOB_STATE_" + key
    try:
        value = job_pb2.JobState.Value(key)
    except ValueError:
        choices = ", ".join(state_name(v) for v in job_pb2.JobState.values() if v)
        raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT,
                              f"states: unknown state {name!r} (one of {choices})",
                              field="states") from None
    if value == 0:
        raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT,
                              f"states: unknown state {name!r}", field="states")
    return value


def month_range(period: str) -> tuple:
    """(start, end) UTC datetimes of a period "YYYY-MM" (a month) or "YYYY-MM-DD" (a day)."""
    try:
        if len(period) == 7:
            y, m = int(period[:4]), int(period[5:7])
            if period[4] != "-" or not 1 <= m <= 12:
                raise ValueError
            start = _dt.datetime(y, m, 1, tzinfo=_dt.timezone.utc)
            days = calendar.monthrange(y, m)[1]
            return start, start + _dt.timedelta(days=days)
        day = _dt.datetime.strptime(period, "%Y-%m-%d").replace(tzinfo=_dt.timezone.utc)
        return day, day + _dt.timedelta(days=1)
    except (ValueError, IndexError):
        raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT,
                              f"period: expected YYYY-MM or YYYY-MM-DD, got {period!r}",
                              field="period") from None


class Watch:
    """Iterator over ``JobEvent`` messages of ``JobService.Watch``.

    When the connection drops it reconnects (with backoff) and resumes after the last
    sequence it delivered, so no event is lost or repeated. ``last_sequence`` is the sequence
    of the last event delivered, ``reconnects`` how often it had to reconnect. ``cancel()``
    (from any thread) ends the iteration.
    """

    def __init__(self, client: "Client", request, *, reconnect: bool, stop_when_terminal: bool,
                 timeout: Optional[float], max_backoff: float = 2.0):
        self._client = client
        self._request = request
        self._reconnect = reconnect
        self._stop_when_terminal = stop_when_terminal
        self._deadline = time.monotonic() + timeout if timeout is not None else None
        self._max_backoff = max_backoff
        self._call = None
        self._cancelled = threading.Event()
        self.last_sequence = request.after_sequence
        self.reconnects = 0
        self._iter = self._run()

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._iter)

    def cancel(self) -> None:
        self._cancelled.set()
        call = self._call
        if call is not None:
            call.cancel()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cancel()

    def _remaining(self) -> Optional[float]:
        if self._deadline is None:
            return None
        return self._deadline - time.monotonic()

    def _run(self):
        backoff = 0.1
        while not self._cancelled.is_set():
            req = job_pb2.WatchJobsRequest()
            req.CopyFrom(self._request)
            req.after_sequence = self.last_sequence
            req.from_start = self._request.from_start and self.last_sequence == 0
            remaining = self._remaining()
            if remaining is not None and remaining <= 0:
                return
            call = self._client._jobs.Watch(req, metadata=self._client._metadata(),
                                            timeout=remaining)
            self._call = call
            if self._cancelled.is_set():
                call.cancel()
                return
            try:
                for resp in call:
                    ev = resp.event
                    if ev.sequence <= self.last_sequence:
                        continue  # never deliver an event twice
                    self.last_sequence = ev.sequence
                    backoff = 0.1
                    yield ev
                    if (self._stop_when_terminal
                            and ev.type == job_pb2.JOB_EVENT_TYPE_STATE_CHANGED
                            and ev.to_state in TERMINAL_STATES):
                        return
            except grpc.RpcError as e:
                code = e.code()
                if self._cancelled.is_set():
                    return
                if code == grpc.StatusCode.DEADLINE_EXCEEDED and self._deadline is not None:
                    return
                if not (self._reconnect and code in _RECONNECT_CODES):
                    raise from_rpc_error(e, "JobService.Watch") from None
            finally:
                call.cancel()
                self._call = None
            if self._cancelled.is_set():
                return
            # The server ended the stream, or the connection dropped: resume.
            self.reconnects += 1
            wait = backoff
            remaining = self._remaining()
            if remaining is not None:
                wait = min(wait, max(remaining, 0))
            self._cancelled.wait(wait)
            backoff = min(backoff * 2, self._max_backoff)


class Client:
    """A connection to the Trainyard API.

    ``Client()`` takes its settings from the environment and the config file (see
    :mod:`trainyard.config`); any of ``target``, ``token``, ``tenant``, ``context``, ``tls``,
    ``ca_file`` overrides them. ``tenant`` is the default tenant for submits and lists; when
    unset it is the only tenant the token has a role in (``AdminService.WhoAmI``).

    Calls raise :class:`trainyard.errors.ApiError` subclasses. Use as a context manager or
    call :meth:`close`.
    """

    def __init__(self, target: Optional[str] = None, token: Optional[str] = None, *,
                 tenant: Optional[str] = None, context: Optional[str] = None,
                 tls: Optional[bool] = None, ca_file: Optional[str] = None,
                 root_certificates: Optional[bytes] = None, timeout: float = 30.0,
                 settings: Optional[Settings] = None):
        self.settings = settings or resolve(target=target, token=token, tenant=tenant,
                                            context=context, tls=tls, ca_file=ca_file)
        self.timeout = timeout
        s = self.settings
        if not s.target:
            raise ConfigError("no API address: set TRAINYARD_ADDR or a context target")
        # Reconnect soon after a lost connection (100 ms, then up to 2 s). Not
        # grpc.min_reconnect_backoff_ms: gRPC takes it as the shortest time a connection
        # attempt may take (20 s by default), and at 100 ms a server busy for a moment
        # before it sent its HTTP/2 settings failed the call ("connection attempt timed
        # out before receiving SETTINGS frame").
        options = [
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2000),
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.keepalive_time_ms", 30000),
        ]
        if s.tls or root_certificates is not None:
            roots = root_certificates
            if roots is None and s.ca_file:
                try:
                    with open(s.ca_file, "rb") as f:
                        roots = f.read()
                except OSError as e:
                    raise ConfigError(f"ca-file {s.ca_file}: {e.strerror}") from None
            creds = grpc.ssl_channel_credentials(root_certificates=roots)
            if s.server_name:
                options.append(("grpc.ssl_target_name_override", s.server_name))
            self._channel = grpc.secure_channel(s.target, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(s.target, options=options)
        self._jobs = job_pb2_grpc.JobServiceStub(self._channel)
        self._queues = queue_pb2_grpc.QueueServiceStub(self._channel)
        self._clusters = cluster_pb2_grpc.ClusterServiceStub(self._channel)
        self._admin = admin_pb2_grpc.AdminServiceStub(self._channel)
        self._accounting = accounting_pb2_grpc.AccountingServiceStub(self._channel)
        self._tenant = s.tenant

    # --- plumbing ---------------------------------------------------------------------------

    def close(self) -> None:
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _metadata(self):
        if not self.settings.token:
            return ()
        return (("authorization", f"Bearer {self.settings.token}"),)

    def _call(self, method, request, name: str, timeout: Optional[float] = None):
        try:
            return method(request, metadata=self._metadata(),
                          timeout=timeout if timeout is not None else self.timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, name) from None

    def _paged(self, method, request, name: str, field: str) -> Iterator:
        """Every item (the repeated ``field`` of each page) of a List call, page by page."""
        while True:
            resp = self._call(method, request, name)
            yield from getattr(resp, field)
            if not resp.next_page_token:
                return
            request.page_token = resp.next_page_token

    @property
    def tenant(self) -> str:
        """The default tenant id (resolved through WhoAmI on first use when not configured)."""
        if not self._tenant:
            caller = self.whoami()
            tenants = sorted({b.tenant for b in caller.bindings if b.tenant})
            if len(tenants) == 1:
                self._tenant = tenants[0]
            elif not tenants:
                raise ConfigError(
                    f"{caller.principal} has no role in any tenant; pass tenant= "
                    "(or set TRAINYARD_TENANT / the context's tenant)")
            else:
                raise ConfigError(
                    f"{caller.principal} has roles in several tenants ({', '.join(tenants)}); "
                    "pass tenant= (or set TRAINYARD_TENANT / the context's tenant)")
        return self._tenant

    def _parent(self, tenant: Optional[str] = None, all_tenants: bool = False) -> str:
        if all_tenants:
            return "tenants/-"
        t = tenant or self.tenant
        return t if t.startswith("tenants/") else f"tenants/{t}"

    def job_name(self, job: Any) -> str:
        """The resource name of a job given as a Job, a name, or an id ("17")."""
        if isinstance(job, job_pb2.Job):
            return job.name
        ref = str(job).strip()
        if ref.startswith("tenants/"):
            return ref
        if ref.isdigit():
            return f"{self._parent()}/jobs/{ref}"
        raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT,
                              f"job: expected a job id (17) or name (tenants/T/jobs/17), got {ref!r}",
                              field="job")

    def queue_name(self, queue: str, tenant: Optional[str] = None) -> str:
        if queue.startswith("tenants/"):
            return queue
        return f"{self._parent(tenant)}/queues/{queue}"

    # --- identity ---------------------------------------------------------------------------

    def whoami(self):
        """The caller's principal and role bindings (``trainyard.v1.Caller``)."""
        return self._call(self._admin.WhoAmI, admin_pb2.WhoAmIRequest(), "AdminService.WhoAmI")

    # --- jobs -------------------------------------------------------------------------------

    def _submit_request(self, job, client_request_id: Optional[str], tenant: Optional[str]):
        spec = as_spec(job)
        rid = client_request_id or spec.client_request_id or f"py-{uuid.uuid4().hex}"
        return job_pb2.SubmitJobRequest(parent=self._parent(tenant), job=to_job_proto(spec),
                                        client_request_id=rid)

    def submit(self, job: Union[JobSpec, dict, str], *, client_request_id: Optional[str] = None,
               tenant: Optional[str] = None, return_response: bool = False):
        """Submits one job (a :class:`JobSpec`, a dict, or a YAML file path) and returns the
        ``trainyard.v1.Job``. Idempotent for a given ``client_request_id`` (generated when not
        given)."""
        req = self._submit_request(job, client_request_id, tenant)
        resp = self._call(self._jobs.Submit, req, "JobService.Submit")
        return resp if return_response else resp.job

    def submit_many(self, jobs: Iterable[Union[JobSpec, dict]], *,
                    tenant: Optional[str] = None, batch_size: int = 1000) -> list:
        """Submits many jobs with ``SubmitBatch`` (all-or-nothing per batch of up to 1000)
        and returns the jobs in order."""
        parent = self._parent(tenant)
        reqs = [self._submit_request(j, None, tenant) for j in jobs]
        out = []
        for i in range(0, len(reqs), batch_size):
            chunk = reqs[i:i + batch_size]
            batch = job_pb2.SubmitJobBatchRequest(parent=parent, requests=chunk)
            resp = self._call(self._jobs.SubmitBatch, batch, "JobService.SubmitBatch")
            out.extend(r.job for r in resp.responses)
        return out

    def get(self, job: Any, *, full: bool = False):
        """Reads a job; ``full=True`` includes its attempts."""
        view = job_pb2.JOB_VIEW_FULL if full else job_pb2.JOB_VIEW_BASIC
        return self._call(self._jobs.Get, job_pb2.GetJobRequest(name=self.job_name(job), view=view),
                          "JobService.Get")

    def list(self, *, queue: str = "", project: str = "", states: Sequence = (),
             labels: Optional[dict] = None, job_set: str = "", tenant: Optional[str] = None,
             all_tenants: bool = False, page_size: int = 100, full: bool = False,
             limit: Optional[int] = None, user: str = "",
             created_after: Optional[_dt.datetime] = None,
             created_before: Optional[_dt.datetime] = None, order_by: str = "") -> Iterator:
        """Iterates over jobs (newest first, or by ``order_by``: "priority desc",
        "display_name", "state", "queue", "create_time"), fetching every page. ``states`` are
        JobState values or names ("running"); ``user`` a principal ("users/ana"; a bare name
        gets "users/"); ``created_after`` (inclusive) and ``created_before`` (exclusive) are
        aware datetimes."""
        if user and "/" not in user:
            user = f"users/{user}"
        req = job_pb2.ListJobsRequest(parent=self._parent(tenant, all_tenants), project=project,
                                      queue=queue, job_set=job_set, page_size=page_size,
                                      view=job_pb2.JOB_VIEW_FULL if full else job_pb2.JOB_VIEW_BASIC,
                                      user=user, order_by=order_by)
        if created_after is not None:
            req.created_after.FromDatetime(created_after)
        if created_before is not None:
            req.created_before.FromDatetime(created_before)
        req.states.extend(parse_state(s) if isinstance(s, str) else int(s) for s in states)
        for k, v in (labels or {}).items():
            req.labels[k] = v
        count = 0
        for j in self._paged(self._jobs.List, req, "JobService.List", "jobs"):
            yield j
            count += 1
            if limit is not None and count >= limit:
                return

    def cancel(self, job: Any, reason: str = ""):
        """Cancels a job (idempotent) and returns it."""
        return self._call(self._jobs.Cancel,
                          job_pb2.CancelJobRequest(name=self.job_name(job), reason=reason),
                          "JobService.Cancel")

    def hold(self, job: Any, reason: str = ""):
        """Holds a queued job (QUEUED -> HELD: not scheduled until released; idempotent) and
        returns it. A job in any other state raises errors.FailedPrecondition."""
        return self._call(self._jobs.Hold,
                          job_pb2.HoldJobRequest(name=self.job_name(job), reason=reason),
                          "JobService.Hold")

    def release(self, job: Any, reason: str = ""):
        """Releases a held job (HELD -> QUEUED, in its old place in line; idempotent) and
        returns it. A job in any other state raises errors.FailedPrecondition."""
        return self._call(self._jobs.Release,
                          job_pb2.ReleaseJobRequest(name=self.job_name(job), reason=reason),
                          "JobService.Release")

    def watch(self, job: Any = None, *, queue: str = "", job_set: str = "",
              tenant: Optional[str] = None, all_tenants: bool = False,
              after_sequence: int = 0, from_start: bool = False,
              stop_when_terminal: Optional[bool] = None, reconnect: bool = True,
              timeout: Optional[float] = None) -> Watch:
        """Streams job events as a :class:`Watch` iterator.

        Without ``after_sequence``/``from_start`` it starts with events from now on; with
        ``from_start`` it replays the retained history first. A dropped connection is
        reopened after the last delivered sequence (``reconnect``). For a single ``job`` the
        iteration ends after its terminal event unless ``stop_when_terminal=False``;
        ``timeout`` (seconds) ends it quietly."""
        req = job_pb2.WatchJobsRequest(parent=self._parent(tenant, all_tenants), queue=queue,
                                       job_set=job_set, after_sequence=after_sequence,
                                       from_start=from_start)
        if job is not None:
            name = self.job_name(job)
            req.job = name
            if not all_tenants:
                req.parent = name.split("/jobs/")[0]
        if stop_when_terminal is None:
            stop_when_terminal = job is not None
        return Watch(self, req, reconnect=reconnect, stop_when_terminal=stop_when_terminal,
                     timeout=timeout)

    def wait(self, job: Any, timeout: Optional[float] = None, *, on_event=None):
        """Blocks until the job is SUCCEEDED, FAILED or CANCELLED and returns it (with its
        attempts). Raises :class:`WaitTimeout` after ``timeout`` seconds. ``on_event`` is
        called with each event while waiting."""
        name = self.job_name(job)
        deadline = time.monotonic() + timeout if timeout is not None else None
        cursor = 0
        while True:
            current = self.get(name, full=True)
            if current.state in TERMINAL_STATES:
                return current
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise WaitTimeout(f"{name} is still {state_name(current.state)} after "
                                  f"{timeout:g}s", job=current)
            # Re-check with Get at least every 15 s in case the event history was trimmed.
            window = 15.0 if remaining is None else min(remaining, 15.0)
            w = self.watch(name, after_sequence=cursor, from_start=cursor == 0,
                           stop_when_terminal=True, timeout=window)
            for ev in w:
                if on_event is not None:
                    on_event(ev)
            cursor = w.last_sequence

    def explain_pending(self, job: Any):
        """Why the job is not running and its position in its queue
        (``trainyard.v1.ExplainPendingResponse``)."""
        return self._call(self._jobs.ExplainPending,
                          job_pb2.ExplainPendingRequest(name=self.job_name(job)),
                          "JobService.ExplainPending")

    def logs(self, job: Any, attempt: int = 0, offset: int = 0):
        """The output of one of the job's attempts (0: the newest) from byte ``offset``
        (``trainyard.v1.JobLogs``): ``text`` runs from ``start_offset`` to ``end_offset``;
        ``complete`` once the attempt has ended and all of it was copied."""
        return self._call(self._jobs.GetLogs,
                          job_pb2.GetJobLogsRequest(name=self.job_name(job), attempt=attempt,
                                                    offset=offset),
                          "JobService.GetLogs")

    def follow_logs(self, job: Any, attempt: int = 0, poll: float = 2.0,
                    timeout: Optional[float] = None) -> Iterator:
        """Yields ``JobLogs`` pieces of one attempt (0: the newest when called) as the
        dispatcher copies them, each from where the last ended, until the attempt's output is
        complete (or ``timeout`` seconds pass: WaitTimeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def pause(what: str) -> None:
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"{what} after {timeout:g}s")
            time.sleep(poll if deadline is None
                       else max(0.0, min(poll, deadline - time.monotonic())))

        r = self.logs(job, attempt)
        # Not admitted yet: wait for its first attempt (unless it ended without one).
        while r.attempt == 0:
            if self.get(job).state in TERMINAL_STATES:
                yield r
                return
            pause(f"{self.job_name(job)} has not started")
            r = self.logs(job, attempt)
        yield r
        attempt, offset = r.attempt, r.end_offset
        while not r.complete:
            pause(f"the output of attempt {attempt} of {self.job_name(job)} is not complete")
            r = self.logs(job, attempt, offset)
            offset = r.end_offset
            if r.text or r.complete:
                yield r

    def report_checkpoint(self, job: Any, *, step: int, uri: str, attempt: int = 0,
                          time_written: Optional[_dt.datetime] = None,
                          metadata: Optional[dict] = None):
        """Records a checkpoint of the job (``ReportCheckpoint``); the highest step becomes the
        job's resume point. ``attempt`` 0 means the job's current attempt."""
        cp = job_pb2.Checkpoint(attempt=attempt, step=step, uri=uri)
        cp.time.FromDatetime(time_written or _dt.datetime.now(_dt.timezone.utc))
        for k, v in (metadata or {}).items():
            cp.metadata[str(k)] = str(v)
        return self._call(self._jobs.ReportCheckpoint,
                          job_pb2.ReportCheckpointRequest(job=self.job_name(job), checkpoint=cp),
                          "JobService.ReportCheckpoint")

    def checkpoints(self, job: Any, page_size: int = 100) -> Iterator:
        """Iterates over the job's checkpoints, newest first."""
        req = job_pb2.ListCheckpointsRequest(job=self.job_name(job), page_size=page_size)
        yield from self._paged(self._jobs.ListCheckpoints, req, "JobService.ListCheckpoints",
                               "checkpoints")

    # --- queues, quotas, usage ----------------------------------------------------------------

    def queues(self, *, tenant: Optional[str] = None, cohort: str = "",
               page_size: int = 100) -> Iterator:
        """Iterates over the tenant's queues."""
        req = queue_pb2.ListQueuesRequest(parent=self._parent(tenant), cohort=cohort,
                                          page_size=page_size)
        yield from self._paged(self._queues.ListQueues, req, "QueueService.ListQueues", "queues")

    def get_queue(self, queue: str, *, tenant: Optional[str] = None):
        """A queue with its quotas (``trainyard.v1.Queue``)."""
        return self._call(self._queues.GetQueue,
                          queue_pb2.GetQueueRequest(name=self.queue_name(queue, tenant)),
                          "QueueService.GetQueue")

    def queue_status(self, queue: str, *, tenant: Optional[str] = None):
        """Jobs per state and usage per flavor and resource (``trainyard.v1.QueueStatus``)."""
        return self._call(self._queues.GetQueueStatus,
                          queue_pb2.GetQueueStatusRequest(name=self.queue_name(queue, tenant)),
                          "QueueService.GetQueueStatus")

    def quota(self, queue: str, *, tenant: Optional[str] = None) -> list:
        """Quota and usage of a queue, one dict per (flavor, resource): ``flavor``,
        ``resource`` ("GPU"), ``nominal``, ``borrowing_limit``, ``lending_limit`` (None when
        unlimited), ``used``, ``borrowed``."""
        q = self.get_queue(queue, tenant=tenant)
        status = self.queue_status(queue, tenant=tenant)
        used = {(u.flavor, u.resource): u for u in status.usage}
        rows = []
        for fq in q.quotas:
            for rq in fq.resources:
                u = used.pop((fq.flavor, rq.resource), None)
                rows.append({
                    "flavor": fq.flavor,
                    "resource": common_pb2.ResourceName.Name(rq.resource).replace("RESOURCE_NAME_", ""),
                    "nominal": rq.nominal,
                    "borrowing_limit": rq.borrowing_limit if rq.HasField("borrowing_limit") else None,
                    "lending_limit": rq.lending_limit if rq.HasField("lending_limit") else None,
                    "used": u.used if u else 0,
                    "borrowed": u.borrowed if u else 0,
                })
        for (flavor, resource), u in sorted(used.items()):
            rows.append({"flavor": flavor,
                         "resource": common_pb2.ResourceName.Name(resource).replace("RESOURCE_NAME_", ""),
                         "nominal": u.nominal, "borrowing_limit": None, "lending_limit": None,
                         "used": u.used, "borrowed": u.borrowed})
        return rows

    def usage(self, queue: str, *, tenant: Optional[str] = None) -> list:
        """Current usage of a queue per flavor and resource (``FlavorUsage`` messages)."""
        return list(self.queue_status(queue, tenant=tenant).usage)

    def capacity(self):
        """Capacity per flavor (``ClusterService.GetCapacity``)."""
        return self._call(self._clusters.GetCapacity, cluster_pb2.GetCapacityRequest(),
                          "ClusterService.GetCapacity")

    # --- accounting ---------------------------------------------------------------------------

    def _report_request(self, period: Optional[str], start, end, group_by, project, queue,
                        tenant, all_tenants, include_idle=False, share_idle=False):
        if period:
            start, end = month_range(period)
        if start is None or end is None:
            raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT,
                                  "period: give a period (YYYY-MM) or start and end",
                                  field="period")
        req = accounting_pb2.GetReportRequest(parent=self._parent(tenant, all_tenants),
                                              project=project, queue=queue,
                                              include_idle=include_idle, share_idle=share_idle)
        req.start_time.FromDatetime(start)
        req.end_time.FromDatetime(end)
        for g in group_by:
            key = "REPORT_DIMENSION_" + str(g).upper()
            try:
                req.group_by.append(accounting_pb2.ReportDimension.Value(key))
            except ValueError:
                choices = ", ".join(n.replace("REPORT_DIMENSION_", "").lower()
                                    for n in accounting_pb2.ReportDimension.keys()
                                    if not n.endswith("UNSPECIFIED"))
                raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT,
                                      f"group_by: unknown dimension {g!r} (one of {choices})",
                                      field="group_by") from None
        return req

    # --- price book and usage (AccountingService) ----------------------------------------------

    def price_book(self):
        """The price book: rate versions and spot prices (``trainyard.v1.PriceBook``)."""
        return self._call(self._accounting.GetPriceBook, accounting_pb2.GetPriceBookRequest(),
                          "AccountingService.GetPriceBook")

    def add_rate(self, flavor: str, resource: str, price_micros: int, effective: _dt.datetime,
                 currency: str = "USD"):
        """Adds a rate version (platform-admin): ``price_micros`` per unit-hour of ``resource``
        ("gpu", "cpu" or "memory") on ``flavor`` from ``effective`` on."""
        rate = accounting_pb2.Rate(
            flavor=flavor,
            resource=common_pb2.ResourceName.Value("RESOURCE_NAME_" + resource.upper()),
            price_per_unit_hour=common_pb2.Money(currency_code=currency, micros=price_micros))
        rate.effective_time.FromDatetime(effective)
        return self._call(self._accounting.AddRate, accounting_pb2.AddRateRequest(rate=rate),
                          "AccountingService.AddRate")

    # --- budgets (AccountingService) ------------------------------------------------------

    def budgets(self, *, tenant: Optional[str] = None, all_tenants: bool = False) -> Iterator:
        """Budgets with the meter's status of the month (``trainyard.v1.Budget``)."""
        req = accounting_pb2.ListBudgetsRequest(parent=self._parent(tenant, all_tenants))
        yield from self._paged(self._accounting.ListBudgets, req,
                               "AccountingService.ListBudgets", "budgets")

    def get_budget(self, budget_id: str, *, tenant: Optional[str] = None):
        """One budget (``AccountingService.GetBudget``)."""
        return self._call(self._accounting.GetBudget,
                          accounting_pb2.GetBudgetRequest(
                              name=f"{self._parent(tenant)}/budgets/{budget_id}"),
                          "AccountingService.GetBudget")

    def set_budget(self, budget_id: str, amount_micros: int,
                   thresholds: Sequence[tuple] = ((100, "hold"),), *, project: str = "",
                   currency: str = "", user_hourly_cap_micros: Optional[int] = None,
                   tenant: Optional[str] = None):
        """Creates the budget, or replaces its amount, thresholds and project: a monthly
        ``amount_micros`` with ``thresholds`` as (percent, action) pairs, action "warn",
        "restrict_to_spot" or "hold". ``user_hourly_cap_micros``, when given, sets the most
        one user's running work in the scope may cost per hour (0: no cap); when not given
        an existing budget keeps its cap. Needs finance or tenant-admin."""
        budget = accounting_pb2.Budget(
            project=project,
            monthly_amount=common_pb2.Money(currency_code=currency, micros=amount_micros))
        if user_hourly_cap_micros is not None:
            budget.user_hourly_cap.CopyFrom(
                common_pb2.Money(currency_code=currency, micros=user_hourly_cap_micros))
        for percent, action in thresholds:
            key = "BUDGET_ACTION_" + str(action).upper()
            try:
                value = accounting_pb2.BudgetAction.Value(key)
            except ValueError:
                raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT,
                                      f"thresholds: unknown action {action!r} (one of warn, "
                                      "restrict_to_spot, hold)", field="thresholds") from None
            budget.thresholds.add(percent=int(percent), action=value)
        try:
            current = self.get_budget(budget_id, tenant=tenant)
        except NotFound:
            return self._call(self._accounting.CreateBudget,
                              accounting_pb2.CreateBudgetRequest(
                                  parent=self._parent(tenant), budget_id=budget_id,
                                  budget=budget),
                              "AccountingService.CreateBudget")
        budget.name = current.name
        budget.etag = current.etag
        req = accounting_pb2.UpdateBudgetRequest(budget=budget)
        req.update_mask.paths.extend(["project", "monthly_amount", "thresholds"])
        if user_hourly_cap_micros is not None:
            req.update_mask.paths.append("user_hourly_cap")
        return self._call(self._accounting.UpdateBudget, req, "AccountingService.UpdateBudget")

    def delete_budget(self, budget_id: str, *, tenant: Optional[str] = None) -> None:
        """Deletes a budget (``AccountingService.DeleteBudget``)."""
        self._call(self._accounting.DeleteBudget,
                   accounting_pb2.DeleteBudgetRequest(
                       name=f"{self._parent(tenant)}/budgets/{budget_id}"),
                   "AccountingService.DeleteBudget")

    def report(self, *, period: Optional[str] = None, start=None, end=None,
               group_by: Sequence[str] = ("project",), project: str = "", queue: str = "",
               tenant: Optional[str] = None, all_tenants: bool = False,
               include_idle: bool = False, share_idle: bool = False):
        """A usage and cost report (``AccountingService.GetReport``). ``include_idle`` adds the
        pools' idle cost in ``__idle__`` rows; ``share_idle`` hands it to the tenants by use.
        Raises :class:`trainyard.errors.Unimplemented` on servers without the accounting
        service."""
        req = self._report_request(period, start, end, group_by, project, queue, tenant,
                                   all_tenants, include_idle, share_idle)
        return self._call(self._accounting.GetReport, req, "AccountingService.GetReport")

    def invoice(self, month: str, *, tenant: Optional[str] = None):
        """The tenant's invoice of a UTC month "YYYY-MM" (``AccountingService.GetInvoice``):
        lines by project, flavor and resource, and the total billed."""
        return self._call(self._accounting.GetInvoice,
                          accounting_pb2.GetInvoiceRequest(
                              name=f"{self._parent(tenant)}/invoices/{month}"),
                          "AccountingService.GetInvoice")

    def export_report(self, *, fmt: str = "csv", **kwargs) -> bytes:
        """The report as CSV or JSON bytes (``AccountingService.ExportReport``)."""
        req = accounting_pb2.ExportReportRequest(
            report=self._report_request(kwargs.pop("period", None), kwargs.pop("start", None),
                                        kwargs.pop("end", None),
                                        kwargs.pop("group_by", ("project",)),
                                        kwargs.pop("project", ""), kwargs.pop("queue", ""),
                                        kwargs.pop("tenant", None),
                                        kwargs.pop("all_tenants", False),
                                        kwargs.pop("include_idle", False),
                                        kwargs.pop("share_idle", False)),
            format=accounting_pb2.REPORT_FORMAT_CSV if fmt == "csv" else accounting_pb2.REPORT_FORMAT_JSON)
        try:
            chunks = self._accounting.ExportReport(req, metadata=self._metadata(),
                                                   timeout=self.timeout)
            return b"".join(c.data for c in chunks)
        except grpc.RpcError as e:
            raise from_rpc_error(e, "AccountingService.ExportReport") from None

    def usage_records(self, *, job: Any = None, period: Optional[str] = None,
                      tenant: Optional[str] = None, page_size: int = 100) -> Iterator:
        """Metered usage lines (``AccountingService.ListUsage``)."""
        req = accounting_pb2.ListUsageRequest(parent=self._parent(tenant), page_size=page_size)
        if job is not None:
            req.job = self.job_name(job)
        if period:
            start, end = month_range(period)
            req.start_time.FromDatetime(start)
            req.end_time.FromDatetime(end)
        yield from self._paged(self._accounting.ListUsage, req, "AccountingService.ListUsage",
                               "records")


__all__ = ["Client", "Watch", "TERMINAL_STATES", "PENDING_STATES", "state_name",
           "parse_state", "month_range", "TrainyardError", "NotFound"]
