"""Trainyard Python SDK: submit, watch and checkpoint training jobs.

    import trainyard
    with trainyard.Client() as c:          # TRAINYARD_ADDR / TRAINYARD_TOKEN or a context
        job = c.submit("job.yaml")
        done = c.wait(job, timeout=3600)

See docs/python-sdk.md.
"""

__version__ = "0.1.0"

from trainyard.errors import (Aborted, AlreadyExists, ApiError, ConfigError,  # noqa: F401
                              DeadlineExceeded, FailedPrecondition, Internal, InvalidArgument,
                              JobSpecError, NotFound, PermissionDenied, ResourceExhausted,
                              TrainyardError, Unauthenticated, Unavailable, Unimplemented,
                              WaitTimeout)
from trainyard.spec import (CheckpointPolicy, JobSpec, Resources, RetryPolicy,  # noqa: F401
                            Topology, specs_from_file, specs_from_yaml)
from trainyard.client import (Client, PENDING_STATES, TERMINAL_STATES, Watch,  # noqa: F401
                              parse_state, state_name)
from trainyard.v1 import job_pb2  # noqa: F401,E402  (JobState and friends)
