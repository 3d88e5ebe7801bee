"""Typed exceptions of the SDK.

Every error the API returns becomes a subclass of :class:`ApiError` that carries the gRPC
status code, the message, and the ``trainyard.v1.ErrorInfo`` the server attaches in the
``trainyard-error-bin`` trailer: the request field at fault (``field``), a stable
machine-readable ``reason`` and, for retryable errors, ``retry_delay`` in seconds.

Problems found on the client side (a job file with bad YAML or an unknown field, a
missing configuration) are :class:`JobSpecError` / :class:`ConfigError`; waiting past a
deadline is :class:`WaitTimeout`.
"""

from __future__ import annotations

from typing import Optional

import grpc


class TrainyardError(Exception):
    """Base class of every error the SDK raises."""


class ConfigError(TrainyardError):
    """The client configuration (address, token, context, TLS files) is missing or bad."""


class JobSpecError(TrainyardError):
    """A job description (dict, YAML file, dataclass) is invalid.

    ``field`` is the path of the bad field (``resources.gpus``), ``line`` the 1-based line
    in the YAML file when known, ``path`` the file.
    """

    def __init__(self, message: str, field: str = "", line: Optional[int] = None,
                 path: str = "", column: Optional[int] = None):
        self.field = field
        self.line = line
        self.column = column
        self.path = path
        self.detail = message
        where = ""
        if path and line is not None:
            where = f"{path}:{line}: "
        elif path:
            where = f"{path}: "
        elif line is not None:
            where = f"line {line}: "
        prefix = f"{field}: " if field else ""
        super().__init__(f"{where}{prefix}{message}")


class WaitTimeout(TrainyardError):
    """``Client.wait`` reached its timeout before the job ended. ``job`` is its last state."""

    def __init__(self, message: str, job=None):
        super().__init__(message)
        self.job = job


class ApiError(TrainyardError):
    """An error returned by the API.

    Attributes: ``code`` (``grpc.StatusCode``), ``message`` (server message, which starts
    with the field path), ``field`` (e.g. ``job.spec.workers``, may be empty), ``reason``
    (e.g. ``OUT_OF_RANGE``), ``retry_delay`` (seconds, or None), ``method`` (RPC name).
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, code: grpc.StatusCode, message: str, field: str = "",
                 reason: str = "", retry_delay: Optional[float] = None, method: str = ""):
        self.code = code
        self.message = message
        self.field = field
        self.reason = reason
        self.retry_delay = retry_delay
        self.method = method
        super().__init__(f"{code.name}: {message}" if message else code.name)

    @property
    def code_name(self) -> str:
        return self.code.name


class InvalidArgument(ApiError):
    """A bad field (named in ``field``), unknown queue/project/priority class."""


class Unauthenticated(ApiError):
    """Missing, malformed, unknown, expired or revoked token."""


class PermissionDenied(ApiError):
    """The caller lacks the role (the message names it)."""


class NotFound(ApiError):
    """The object does not exist or is not visible to the caller."""


class AlreadyExists(ApiError):
    """Create with an id in use, or a reused client_request_id for a different job."""


class FailedPrecondition(ApiError):
    """The object is not in a state that allows the operation."""


class Aborted(ApiError):
    """Stale etag or a concurrent change; retry."""


class ResourceExhausted(ApiError):
    """Rate limited; ``retry_delay`` says when to retry."""


class Unavailable(ApiError):
    """The server (or its database) cannot be reached; retry."""


class DeadlineExceeded(ApiError):
    """The call did not complete within its deadline."""


class Unimplemented(ApiError):
    """The server does not implement this method (e.g. accounting before its service exists)."""


class Internal(ApiError):
    """A server-side bug; details are in the server log."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ABORTED: Aborted,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.INTERNAL: Internal,
    grpc.StatusCode.DATA_LOSS: Internal,
}

ERROR_TRAILER = "trainyard-error-bin"


def from_rpc_error(err: grpc.RpcError, method: str = "") -> ApiError:
    """Converts a ``grpc.RpcError`` into the matching :class:`ApiError` subclass."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = err.details() if hasattr(err, "details") else str(err)
    message = message or ""
    field, reason, retry_delay = "", "", None
    trailers = ()
    try:
        trailers = err.trailing_metadata() or ()
    except Exception:  # not a call object (e.g. a channel failure)
        trailers = ()
    for key, value in trailers:
        if key == ERROR_TRAILER:
            from trainyard.v1 import common_pb2
            info = common_pb2.ErrorInfo()
            try:
                info.ParseFromString(value if isinstance(value, bytes) else value.encode())
            except Exception:
                continue
            field, reason = info.field, info.reason
            if info.HasField("retry_delay"):
                retry_delay = info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    if not field and code == grpc.StatusCode.INVALID_ARGUMENT and ": " in message:
        # The message starts with the field path even without the trailer.
        head = message.split(": ", 1)[0]
        if head and " " not in head:
            field = head
    cls = _BY_CODE.get(code, ApiError)
    return cls(code, message, field=field, reason=reason, retry_delay=retry_delay,
               method=method)
