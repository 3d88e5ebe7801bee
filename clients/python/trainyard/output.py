"""Rendering for `yard`: tables for people, JSON and YAML for scripts."""

from __future__ import annotations

import datetime as _dt
import json
import sys
from typing import Any, Iterable, Sequence

import yaml
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message


def to_plain(obj: Any) -> Any:
    """Protobuf messages (and lists/dicts of them) as plain JSON-able values. Field names
    are the proto names (snake_case); enums are their names; 64-bit integers stay strings
    as in the proto3 JSON mapping."""
    if isinstance(obj, Message):
        return MessageToDict(obj, preserving_proto_field_name=True)
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj


def dump(obj: Any, fmt: str, out=None) -> None:
    out = out or sys.stdout
    plain = to_plain(obj)
    if fmt == "json":
        json.dump(plain, out, indent=2, sort_keys=False)
        out.write("\n")
    elif fmt == "yaml":
        yaml.safe_dump(plain, out, sort_keys=False, default_flow_style=False)
    else:  # pragma: no cover - callers handle tables
        raise ValueError(fmt)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out=None) -> None:
    out = out or sys.stdout
    rows = [["" if c is None else str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    fmt = "  ".join("{:<%d}" % w for w in widths)
    out.write(fmt.format(*headers).rstrip() + "\n")
    for r in rows:
        out.write(fmt.format(*r).rstrip() + "\n")


def kv(pairs: Iterable[tuple], out=None) -> None:
    out = out or sys.stdout
    pairs = [(k, "" if v is None else str(v)) for k, v in pairs]
    width = max((len(k) for k, _ in pairs), default=0)
    for k, v in pairs:
        out.write(f"{k + ':':<{width + 1}} {v}\n")


def ts(t) -> str:
    """A protobuf Timestamp as "2026-11-23T14:05:03Z" ("" when unset)."""
    if t is None or (t.seconds == 0 and t.nanos == 0):
        return ""
    d = _dt.datetime.fromtimestamp(t.seconds + t.nanos / 1e9, tz=_dt.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%SZ")


def age(t, now: float = None) -> str:
    if t is None or (t.seconds == 0 and t.nanos == 0):
        return ""
    import time as _time
    secs = max(0, int((now or _time.time()) - t.seconds))
    if secs < 120:
        return f"{secs}s"
    if secs < 7200:
        return f"{secs // 60}m"
    if secs < 172800:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"


def duration(d) -> str:
    if d is None or (d.seconds == 0 and d.nanos == 0):
        return ""
    s = d.seconds + d.nanos / 1e9
    parts = []
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= n:
            parts.append(f"{int(s // n)}{unit}")
            s -= (s // n) * n
    if s or not parts:
        parts.append(f"{s:g}s")
    return "".join(parts)


def money(m) -> str:
    if m is None or not m.currency_code:
        return ""
    return f"{m.micros / 1e6:,.2f} {m.currency_code}"
