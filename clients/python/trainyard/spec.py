"""Job descriptions: dataclasses, dicts and YAML files, and their conversion to the API.

A job is described by :class:`JobSpec` (see docs/job-yaml.md for every field). The same
shape is accepted as a Python dict or a YAML document; unknown fields are rejected and
named, and errors in a YAML file carry its line number.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from trainyard.errors import JobSpecError

Number = Union[int, float]


@dataclass
class Resources:
    """What one worker needs."""

    gpus: int = 0
    gpu_model: str = ""
    # CPU cores: a number (8, 0.5) or a Kubernetes-style string ("500m").
    cpus: Union[Number, str] = 0
    # Memory: bytes, or a string with a unit ("64Gi", "512Mi", "1T").
    memory: Union[int, str] = 0


@dataclass
class CheckpointPolicy:
    """How the job checkpoints. Durations are seconds or strings such as "10m"."""

    directory: str = ""
    interval: Union[Number, str, None] = None
    resumable: bool = False
    grace_period: Union[Number, str, None] = None


@dataclass
class RetryPolicy:
    """Retries of user errors."""

    max_attempts: int = 0
    initial_backoff: Union[Number, str, None] = None
    max_backoff: Union[Number, str, None] = None
    retryable_exit_codes: list = field(default_factory=list)


@dataclass
class Topology:
    """Gang placement constraint: "block" or "rack"."""

    required: str = ""
    preferred: str = ""


@dataclass
class JobSpec:
    """A job to submit. ``name`` is the display name; the server assigns the id."""

    name: str = ""
    project: str = ""
    queue: str = ""
    priority_class: str = ""
    workers: int = 1
    resources: Resources = field(default_factory=Resources)
    image: str = ""
    command: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    working_dir: str = ""
    time_limit: Union[Number, str, None] = None
    expected_runtime: Union[Number, str, None] = None
    # never | allowed | preferred | required (default: allowed when resumable, else never)
    spot: str = ""
    checkpoint: Optional[CheckpointPolicy] = None
    retry: Optional[RetryPolicy] = None
    # any | slurm | kubernetes | sim
    backend: str = ""
    topology: Optional[Topology] = None
    job_set: str = ""
    labels: dict = field(default_factory=dict)
    # Idempotency key; generated when empty.
    client_request_id: str = ""


SPOT_POLICIES = ("never", "allowed", "preferred", "required")
BACKENDS = ("any", "slurm", "kubernetes", "sim")
TOPOLOGY_LEVELS = ("block", "rack")

# Accepted alternative spellings (the proto field names).
_ALIASES = {
    JobSpec: {"display_name": "name", "spot_policy": "spot"},
    Resources: {"cpu_millis": None, "memory_bytes": None},
    Topology: {"required_level": "required", "preferred_level": "preferred"},
}

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|us|s|m|h|d)")
_MEMORY_UNITS = {
    "": 1, "k": 1000, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
    "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4,
}
_DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _plain_number(value: Any, types, expected: str, field_path: str,
                  lines: Optional[dict]):
    """`value` if it is a number of `types` (not negative), None if it is not a number
    (a string to parse); a boolean is an error (`expected`: what was expected)."""
    if isinstance(value, bool):
        raise _err(field_path, f"expected {expected}, got a boolean", lines)
    if isinstance(value, types):
        if value < 0:
            raise _err(field_path, f"must not be negative, got {value}", lines)
        return value
    return None


def parse_duration(value: Any, field_path: str = "", lines: Optional[dict] = None) -> float:
    """Seconds from a number of seconds or a string like "90s", "1h30m", "2d", "500ms"."""
    n = _plain_number(value, (int, float), "a duration such as 90s or 1h30m", field_path, lines)
    if n is not None:
        return float(n)
    if isinstance(value, str):
        s = value.strip()
        pos, total = 0, 0.0
        for m in _DURATION_RE.finditer(s):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
            pos = m.end()
        if s and pos == len(s):
            return total
    raise _err(field_path, f"expected a duration such as 90s, 10m or 1h30m, got {value!r}",
               lines)


def parse_memory(value: Any, field_path: str = "", lines: Optional[dict] = None) -> int:
    """Bytes from an integer or a string like "64Gi", "512Mi", "1T"."""
    n = _plain_number(value, int, "bytes or a size such as 64Gi", field_path, lines)
    if n is not None:
        return n
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKMGT]i?|)\s*", value)
        if m and m.group(2) in _MEMORY_UNITS:
            return int(float(m.group(1)) * _MEMORY_UNITS[m.group(2)])
    raise _err(field_path, f"expected bytes or a size such as 64Gi or 512Mi, got {value!r}",
               lines)


def parse_cpus(value: Any, field_path: str = "", lines: Optional[dict] = None) -> int:
    """Millicores from a number of cores (8, 0.5) or a string ("500m", "2")."""
    n = _plain_number(value, (int, float), "a number of cores", field_path, lines)
    if n is not None:
        return int(round(n * 1000))
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)(m?)\s*", value)
        if m:
            n = float(m.group(1))
            return int(round(n if m.group(2) else n * 1000))
    raise _err(field_path, f"expected a number of cores such as 8, 0.5 or 500m, got {value!r}",
               lines)


def _err(field_path: str, message: str, lines: Optional[dict]) -> JobSpecError:
    line = None
    if lines:
        # The line of the field itself, else of its closest parent.
        p = field_path
        while p and p not in lines:
            p = p.rsplit(".", 1)[0] if "." in p else ""
        line = lines.get(p, lines.get("", None))
    return JobSpecError(message, field=field_path, line=line)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _from_mapping(cls, data: Any, prefix: str, lines: Optional[dict]):
    if dataclasses.is_dataclass(data) and isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise _err(prefix, f"expected a mapping, got {type(data).__name__}", lines)
    known = {f.name: f for f in dataclasses.fields(cls)}
    aliases = _ALIASES.get(cls, {})
    kwargs: dict = {}
    for key, value in data.items():
        path = _join(prefix, str(key))
        if not isinstance(key, str):
            raise _err(path, "field names must be strings", lines)
        name = key
        if key in aliases:
            name = aliases[key]
            if name is None:  # handled below (unit conversion fields)
                kwargs[key] = value
                continue
        if name not in known:
            choices = ", ".join(sorted(known))
            raise _err(path, f"unknown field {key!r} (known fields: {choices})", lines)
        if name in kwargs:
            raise _err(path, f"{key!r} given twice (also as an alias)", lines)
        kwargs[name] = (value, path)
    out = cls()
    for name, packed in kwargs.items():
        if name in ("cpu_millis", "memory_bytes"):
            path = _join(prefix, name)
            if not isinstance(packed, int) or isinstance(packed, bool) or packed < 0:
                raise _err(path, f"expected a non-negative integer, got {packed!r}", lines)
            if name == "cpu_millis":
                out.cpus = f"{packed}m"
            else:
                out.memory = packed
            continue
        value, path = packed
        setattr(out, name, _convert_field(cls, name, value, path, lines))
    return out


def _expect_int(value, path, lines, minimum=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise _err(path, f"expected an integer, got {value!r}", lines)
    if minimum is not None and value < minimum:
        raise _err(path, f"must be at least {minimum}, got {value}", lines)
    return value


def _expect_str(value, path, lines):
    if value is None:
        return ""
    if isinstance(value, (dict, list, bool)):
        raise _err(path, f"expected a string, got {type(value).__name__}", lines)
    return str(value)


def _expect_str_map(value, path, lines):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _err(path, f"expected a mapping of names to strings, got {type(value).__name__}",
                   lines)
    out = {}
    for k, v in value.items():
        if isinstance(v, (dict, list)) or v is None:
            raise _err(f"{path}.{k}", "expected a string value", lines)
        out[str(k)] = v if isinstance(v, str) else (str(v).lower() if isinstance(v, bool) else str(v))
    return out


def _convert_field(cls, name, value, path, lines):
    if cls is JobSpec:
        if name == "workers":
            return _expect_int(value, path, lines, minimum=1)
        if name == "resources":
            return _from_mapping(Resources, value, path, lines)
        if name == "checkpoint":
            return _from_mapping(CheckpointPolicy, value, path, lines)
        if name == "retry":
            return _from_mapping(RetryPolicy, value, path, lines)
        if name == "topology":
            return _from_mapping(Topology, value, path, lines)
        if name == "command":
            if isinstance(value, str):
                return ["/bin/sh", "-c", value]
            if not isinstance(value, list) or any(isinstance(v, (dict, list)) for v in value):
                raise _err(path, "expected a list of strings (or one shell command string)",
                           lines)
            return [str(v) for v in value]
        if name in ("env", "labels"):
            return _expect_str_map(value, path, lines)
        if name in ("time_limit", "expected_runtime"):
            parse_duration(value, path, lines)
            return value
        if name == "spot":
            v = _expect_str(value, path, lines).lower()
            if v not in SPOT_POLICIES:
                raise _err(path, f"must be one of {', '.join(SPOT_POLICIES)}, got {value!r}",
                           lines)
            return v
        if name == "backend":
            v = _expect_str(value, path, lines).lower()
            if v not in BACKENDS:
                raise _err(path, f"must be one of {', '.join(BACKENDS)}, got {value!r}", lines)
            return v
        return _expect_str(value, path, lines)
    if cls is Resources:
        if name == "gpus":
            return _expect_int(value, path, lines, minimum=0)
        if name == "cpus":
            parse_cpus(value, path, lines)
            return value
        if name == "memory":
            parse_memory(value, path, lines)
            return value
        return _expect_str(value, path, lines)
    if cls is CheckpointPolicy:
        if name == "resumable":
            if not isinstance(value, bool):
                raise _err(path, f"expected true or false, got {value!r}", lines)
            return value
        if name in ("interval", "grace_period"):
            parse_duration(value, path, lines)
            return value
        return _expect_str(value, path, lines)
    if cls is RetryPolicy:
        if name == "max_attempts":
            return _expect_int(value, path, lines, minimum=0)
        if name == "retryable_exit_codes":
            if not isinstance(value, list):
                raise _err(path, "expected a list of integers", lines)
            return [_expect_int(v, f"{path}[{i}]", lines) for i, v in enumerate(value)]
        parse_duration(value, path, lines)
        return value
    if cls is Topology:
        v = _expect_str(value, path, lines).lower()
        if v and v not in TOPOLOGY_LEVELS:
            raise _err(path, f"must be one of {', '.join(TOPOLOGY_LEVELS)}, got {value!r}", lines)
        return v
    raise _err(path, "unsupported field", lines)  # pragma: no cover


def spec_from_dict(data: Any, lines: Optional[dict] = None) -> JobSpec:
    """A :class:`JobSpec` from a dict; raises :class:`JobSpecError` naming the bad field."""
    if data is None:
        raise _err("", "empty job description", lines)
    return _from_mapping(JobSpec, data, "", lines)


# --- YAML with line numbers -------------------------------------------------------------

def _node_to_python(loader, node, path: str, lines: dict):
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out = {}
        seen = {}
        loader.flatten_mapping(node)
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            kpath = _join(path, str(key))
            if key in seen:
                raise JobSpecError(
                    f"duplicate key {key!r} (first on line {seen[key]})", field=kpath,
                    line=key_node.start_mark.line + 1)
            seen[key] = key_node.start_mark.line + 1
            lines[kpath] = key_node.start_mark.line + 1
            out[key] = _node_to_python(loader, value_node, kpath, lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_node_to_python(loader, child, f"{path}[{i}]", lines)
                for i, child in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def load_yaml_documents(text: str, path: str = "") -> list:
    """Parses YAML text into ``[(data, lines)]``, one per document; ``lines`` maps field
    paths to 1-based line numbers. Syntax errors raise :class:`JobSpecError` with the line."""
    loader = yaml.SafeLoader(text)
    docs = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            lines: dict = {}
            data = _node_to_python(loader, node, "", lines)
            if data is None:
                continue
            docs.append((data, lines))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "invalid YAML"
        line = mark.line + 1 if mark is not None else None
        col = mark.column + 1 if mark is not None else None
        raise JobSpecError(f"invalid YAML: {problem}"
                           + (f" (column {col})" if col else ""),
                           line=line, column=col, path=path) from None
    except yaml.YAMLError as e:
        raise JobSpecError(f"invalid YAML: {e}", path=path) from None
    except JobSpecError as e:
        e.path = path
        raise JobSpecError(e.detail, field=e.field, line=e.line, path=path) from None
    finally:
        loader.dispose()
    return docs


def specs_from_yaml(text: str, path: str = "") -> list:
    """Every job of a YAML text (several documents separated by ``---`` for several jobs)."""
    docs = load_yaml_documents(text, path)
    if not docs:
        raise JobSpecError("no job in the file", path=path)
    out = []
    for data, lines in docs:
        try:
            out.append(spec_from_dict(data, lines))
        except JobSpecError as e:
            raise JobSpecError(e.detail, field=e.field, line=e.line, path=path) from None
    return out


def specs_from_file(path: Union[str, Path]) -> list:
    p = Path(path)
    try:
        text = p.read_text() if str(path) != "-" else __import__("sys").stdin.read()
    except OSError as e:
        raise JobSpecError(f"cannot read file: {e.strerror}", path=str(path)) from None
    except UnicodeDecodeError:
        raise JobSpecError("not a UTF-8 text file", path=str(path)) from None
    return specs_from_yaml(text, str(path))


# --- to the API ----------------------------------------------------------------------------

def _duration(msg, seconds: float) -> None:
    whole = int(seconds)
    msg.seconds = whole
    msg.nanos = int(round((seconds - whole) * 1e9))


def to_job_proto(spec: JobSpec):
    """The ``trainyard.v1.Job`` (display_name, labels, spec) of a :class:`JobSpec`."""
    from trainyard.v1 import job_pb2

    job = job_pb2.Job(display_name=spec.name)
    for k, v in spec.labels.items():
        job.labels[k] = v
    s = job.spec
    s.project = spec.project
    s.queue = spec.queue
    s.priority_class = spec.priority_class
    s.workers = spec.workers
    r = spec.resources or Resources()
    s.resources.gpus = r.gpus
    s.resources.gpu_model = r.gpu_model
    s.resources.cpu_millis = parse_cpus(r.cpus, "resources.cpus")
    s.resources.memory_bytes = parse_memory(r.memory, "resources.memory")
    s.image = spec.image
    s.command.extend(spec.command)
    for k, v in spec.env.items():
        s.env[k] = v
    s.working_dir = spec.working_dir
    if spec.time_limit is not None:
        _duration(s.time_limit, parse_duration(spec.time_limit, "time_limit"))
    if spec.expected_runtime is not None:
        _duration(s.expected_runtime, parse_duration(spec.expected_runtime, "expected_runtime"))
    if spec.spot:
        s.spot_policy = job_pb2.SpotPolicy.Value(f"SPOT_POLICY_{spec.spot.upper()}")
    if spec.checkpoint is not None:
        c = spec.checkpoint
        s.checkpoint.directory = c.directory
        s.checkpoint.resumable = c.resumable
        if c.interval is not None:
            _duration(s.checkpoint.interval, parse_duration(c.interval, "checkpoint.interval"))
        if c.grace_period is not None:
            _duration(s.checkpoint.grace_period,
                      parse_duration(c.grace_period, "checkpoint.grace_period"))
    if spec.retry is not None:
        rp = spec.retry
        s.retry.max_attempts = rp.max_attempts
        s.retry.retryable_exit_codes.extend(rp.retryable_exit_codes)
        if rp.initial_backoff is not None:
            _duration(s.retry.initial_backoff,
                      parse_duration(rp.initial_backoff, "retry.initial_backoff"))
        if rp.max_backoff is not None:
            _duration(s.retry.max_backoff, parse_duration(rp.max_backoff, "retry.max_backoff"))
    if spec.backend:
        s.backend = job_pb2.BackendPreference.Value(f"BACKEND_PREFERENCE_{spec.backend.upper()}")
    if spec.topology is not None:
        t = spec.topology
        if t.required:
            s.topology.required_level = job_pb2.TopologyLevel.Value(
                f"TOPOLOGY_LEVEL_{t.required.upper()}")
        if t.preferred:
            s.topology.preferred_level = job_pb2.TopologyLevel.Value(
                f"TOPOLOGY_LEVEL_{t.preferred.upper()}")
    s.job_set = spec.job_set
    return job


def as_spec(job: Any) -> JobSpec:
    """A :class:`JobSpec` from a JobSpec, a dict, or a path to a YAML file with one job."""
    if isinstance(job, JobSpec):
        # Validate a hand-built dataclass the same way as a dict.
        def prune(d):
            return {k: (prune(v) if isinstance(v, dict) and k not in ("env", "labels") else v)
                    for k, v in d.items() if v is not None and v != "" and v != []}
        return spec_from_dict(prune(dataclasses.asdict(job)))
    if isinstance(job, dict):
        return spec_from_dict(job)
    if isinstance(job, (str, Path)):
        specs = specs_from_file(job)
        if len(specs) != 1:
            raise JobSpecError(f"expected one job, the file has {len(specs)} (use submit_many)",
                               path=str(job))
        return specs[0]
    raise JobSpecError(f"cannot make a job from {type(job).__name__}")
