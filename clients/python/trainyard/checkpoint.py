"""Checkpointing inside a training job.

The dispatcher starts every worker with (services/dispatcher/adapters/adapter.h)::

    TRAINYARD_JOB             tenants/<tenant>/jobs/<id>
    TRAINYARD_JOB_ID          <id>
    TRAINYARD_TENANT          <tenant>
    TRAINYARD_ATTEMPT         attempt number (1, 2, ...)
    TRAINYARD_WORKER_INDEX    0-based worker index (set by the backend)
    TRAINYARD_CHECKPOINT_DIR  spec.checkpoint.directory (when set)
    TRAINYARD_RESUME_FROM     the checkpoint to resume from (when there is one)

Typical loop::

    from trainyard import checkpoint

    ckpt = checkpoint.Checkpointer(every_seconds=600)   # installs the USR1/TERM handler
    state, step = init(), 0
    if ckpt.resume_from:
        state, step = load(ckpt.resume_from)
    while step < total:
        state = train_step(state); step += 1
        if ckpt.due(step):                  # interval passed, or a signal asked for one
            path = ckpt.path_for(step)      # <dir>/step-<step>
            save(state, path)
            ckpt.saved(step, path, metadata={"loss": f"{loss:.4f}"})
        if ckpt.stop_requested:             # SIGTERM: checkpointed above, now leave
            break

``saved`` writes the manifest ``<dir>/trainyard-checkpoint.json`` (what adapters look for;
written atomically) and reports the checkpoint with ``JobService.ReportCheckpoint`` when an
API address and token are available (TRAINYARD_ADDR / TRAINYARD_API and TRAINYARD_TOKEN, or
a context). A failed report is logged, not raised: the manifest remains the record.

Signals: SIGUSR1 asks for a checkpoint at the next ``due()``; SIGTERM (what preemption sends
at the start of the grace period) asks for a checkpoint and sets ``stop_requested``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Optional

MANIFEST = "trainyard-checkpoint.json"
MANIFEST_VERSION = 1
HISTORY = 16


def _int_env(name: str, default: int = 0) -> int:
    try:
        return int(os.environ.get(name, "") or default)
    except ValueError:
        return default


def read_manifest(directory) -> Optional[dict]:
    """The manifest of a checkpoint directory, or None if there is none (or it is unreadable)."""
    try:
        with open(Path(directory) / MANIFEST) as f:
            data = json.load(f)
        return data if isinstance(data, dict) and "step" in data and "uri" in data else None
    except (OSError, ValueError):
        return None


class Checkpointer:
    """Reads the job's environment, decides when to checkpoint, records checkpoints.

    ``every_seconds`` / ``every_steps``: periodic checkpoints (either or both; neither means
    only on signals). ``directory`` defaults to TRAINYARD_CHECKPOINT_DIR. ``report`` False
    disables ``ReportCheckpoint``; None reports when an API address is configured.
    ``install_signals`` installs handlers for SIGUSR1 and SIGTERM (main thread only).
    """

    def __init__(self, directory: Optional[str] = None, *, every_seconds: Optional[float] = None,
                 every_steps: Optional[int] = None, report: Optional[bool] = None,
                 install_signals: bool = True, client=None, log=None):
        env = os.environ
        self.job = env.get("TRAINYARD_JOB", "")
        self.job_id = env.get("TRAINYARD_JOB_ID", "")
        self.tenant = env.get("TRAINYARD_TENANT", "")
        if not self.job and self.job_id and self.tenant:
            self.job = f"tenants/{self.tenant}/jobs/{self.job_id}"
        if self.job and not self.job_id:
            self.job_id = self.job.rsplit("/", 1)[-1]
        self.attempt = _int_env("TRAINYARD_ATTEMPT", 0)
        self.worker_index = _int_env("TRAINYARD_WORKER_INDEX", 0)
        self.directory = Path(directory or env.get("TRAINYARD_CHECKPOINT_DIR") or ".")
        self.every_seconds = every_seconds
        self.every_steps = every_steps
        self._log = log or (lambda msg: print(f"trainyard.checkpoint: {msg}", file=sys.stderr,
                                              flush=True))
        self._requested = threading.Event()
        self._stop = threading.Event()
        self._last_time = time.monotonic()
        self._last_step: Optional[int] = None
        self._client = client
        self._report = report
        self.reported: list = []  # (step, uri) reported to the API
        self.resume_from = env.get("TRAINYARD_RESUME_FROM", "") or None
        if self.resume_from is None:
            # The platform may not know the last checkpoint (e.g. its report failed); the
            # manifest of this job's directory does.
            m = read_manifest(self.directory)
            if m and (not self.job or m.get("job") in ("", self.job)):
                self.resume_from = m["uri"]
        if install_signals:
            self.install_signal_handlers()

    # --- signals -----------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGUSR1, self._on_usr1)
        signal.signal(signal.SIGTERM, self._on_term)

    def _on_usr1(self, signum, frame):
        self._requested.set()

    def _on_term(self, signum, frame):
        self._requested.set()
        self._stop.set()

    def request(self) -> None:
        """Asks for a checkpoint at the next ``due()`` (what SIGUSR1 does)."""
        self._requested.set()

    @property
    def stop_requested(self) -> bool:
        """True after SIGTERM: checkpoint (``due()`` is True) and exit."""
        return self._stop.is_set()

    # --- deciding ----------------------------------------------------------------------------

    def due(self, step: int) -> bool:
        """Whether to checkpoint now, after ``step``."""
        if self._requested.is_set():
            return True
        if self._last_step is not None and step == self._last_step:
            return False
        if self.every_steps and step % self.every_steps == 0:
            return True
        if self.every_seconds is not None and time.monotonic() - self._last_time >= self.every_seconds:
            return True
        return False

    def path_for(self, step: int) -> Path:
        """Where to write the checkpoint of ``step``: ``<dir>/step-<step>`` (created)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        return self.directory / f"step-{step:09d}"

    # --- recording ---------------------------------------------------------------------------

    def _get_client(self):
        if self._client is not None or self._report is False:
            return self._client
        env = os.environ
        if self._report is None and not (env.get("TRAINYARD_ADDR") or env.get("TRAINYARD_API")
                                         or env.get("TRAINYARD_CONTEXT")):
            return None
        if not self.job:
            return None
        from trainyard.client import Client
        self._client = Client(timeout=10.0)
        return self._client

    def saved(self, step: int, uri, *, metadata: Optional[dict] = None) -> None:
        """Records a checkpoint the script has written completely: updates the manifest,
        then reports it to the API. Call it only after the files are durable."""
        uri = str(uri)
        now = _dt.datetime.now(_dt.timezone.utc)
        self._write_manifest(step, uri, now, metadata or {})
        self._requested.clear()
        self._last_time = time.monotonic()
        self._last_step = step
        client = self._get_client()
        if client is None:
            return
        try:
            client.report_checkpoint(self.job, step=step, uri=uri, attempt=self.attempt,
                                     time_written=now, metadata=metadata)
            self.reported.append((step, uri))
        except Exception as e:  # never kill training over a report
            self._log(f"ReportCheckpoint of step {step} failed: {e}")

    def _write_manifest(self, step: int, uri: str, when, metadata: dict) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        old = read_manifest(self.directory) or {}
        history = [h for h in old.get("history", []) if isinstance(h, dict)]
        entry = {"step": step, "uri": uri, "time": when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                 "attempt": self.attempt}
        history = ([entry] + history)[:HISTORY]
        data = {"version": MANIFEST_VERSION, "job": self.job, "attempt": self.attempt,
                "step": step, "uri": uri, "time": entry["time"],
                "metadata": {str(k): str(v) for k, v in metadata.items()},
                "history": history}
        path = self.directory / MANIFEST
        tmp = self.directory / f".{MANIFEST}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
