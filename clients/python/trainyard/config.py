"""Client configuration: explicit arguments, environment, and named contexts.

The config file (like a kubeconfig) is YAML::

    current-context: local
    contexts:
      local:
        target: 127.0.0.1:50051
        token-file: /path/to/demo.token   # or token: ty_...
        tenant: demo
      prod:
        target: trainyard.example.com:443
        tls: true
        ca-file: /etc/ssl/certs/corp-ca.pem   # optional; system roots otherwise
        token: ty_...

Its path is ``$TRAINYARD_CONFIG`` if set, else ``$XDG_CONFIG_HOME/trainyard/config.yaml``,
else ``~/.config/trainyard/config.yaml``.

Precedence, highest first: arguments given to :class:`trainyard.Client`; the context named
explicitly (``context=`` / ``yard --context``); the environment (``TRAINYARD_ADDR``,
``TRAINYARD_TOKEN``, ``TRAINYARD_TENANT``, ``TRAINYARD_TLS``, ``TRAINYARD_CA_FILE``); the
context chosen by ``TRAINYARD_CONTEXT`` or ``current-context``; the default target
``127.0.0.1:50051``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from trainyard.errors import ConfigError

DEFAULT_TARGET = "127.0.0.1:50051"
CONTEXT_KEYS = {"target", "token", "token-file", "tenant", "tls", "ca-file", "server-name"}


def config_path() -> Path:
    env = os.environ.get("TRAINYARD_CONFIG")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg else Path.home() / ".config"
    return base / "trainyard" / "config.yaml"


@dataclass
class ConfigFile:
    """The parsed config file."""

    path: Path
    current_context: str = ""
    contexts: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: Optional[Path] = None) -> "ConfigFile":
        path = path or config_path()
        if not path.exists():
            return cls(path=path)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            line = f":{mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"{path}{line}: invalid YAML: {getattr(e, 'problem', e)}") from None
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level")
        contexts = data.get("contexts") or {}
        if not isinstance(contexts, dict):
            raise ConfigError(f"{path}: contexts: expected a mapping of name -> settings")
        for name, ctx in contexts.items():
            if not isinstance(ctx, dict):
                raise ConfigError(f"{path}: contexts.{name}: expected a mapping")
            unknown = set(ctx) - CONTEXT_KEYS
            if unknown:
                raise ConfigError(
                    f"{path}: contexts.{name}.{sorted(unknown)[0]}: unknown key "
                    f"(known: {', '.join(sorted(CONTEXT_KEYS))})")
        return cls(path=path, current_context=str(data.get("current-context") or ""),
                   contexts={str(k): dict(v) for k, v in contexts.items()})

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"current-context": self.current_context, "contexts": self.contexts}
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(data, f, sort_keys=True)
        os.replace(tmp, self.path)

    def context(self, name: str) -> dict:
        if name not in self.contexts:
            known = ", ".join(sorted(self.contexts)) or "none"
            raise ConfigError(f"context {name!r} not found in {self.path} (known: {known})")
        return self.contexts[name]


@dataclass
class Settings:
    """Resolved connection settings."""

    target: str = DEFAULT_TARGET
    token: str = ""
    tenant: str = ""
    tls: bool = False
    ca_file: str = ""
    server_name: str = ""
    context: str = ""


def _truthy(value) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _from_context(ctx: dict, path: Path) -> dict:
    out = {}
    if "target" in ctx:
        out["target"] = str(ctx["target"])
    if "token" in ctx:
        out["token"] = str(ctx["token"])
    elif "token-file" in ctx:
        token_file = Path(os.path.expanduser(str(ctx["token-file"])))
        try:
            out["token"] = token_file.read_text().strip()
        except OSError as e:
            raise ConfigError(f"{path}: token-file {token_file}: {e.strerror}") from None
    if "tenant" in ctx:
        out["tenant"] = str(ctx["tenant"])
    if "tls" in ctx:
        out["tls"] = _truthy(ctx["tls"])
    if "ca-file" in ctx:
        out["ca_file"] = os.path.expanduser(str(ctx["ca-file"]))
    if "server-name" in ctx:
        out["server_name"] = str(ctx["server-name"])
    return out


def _from_env() -> dict:
    out = {}
    addr = os.environ.get("TRAINYARD_ADDR") or os.environ.get("TRAINYARD_API")
    if addr:
        out["target"] = addr
    if os.environ.get("TRAINYARD_TOKEN"):
        out["token"] = os.environ["TRAINYARD_TOKEN"].strip()
    if os.environ.get("TRAINYARD_TENANT"):
        out["tenant"] = os.environ["TRAINYARD_TENANT"]
    if os.environ.get("TRAINYARD_TLS"):
        out["tls"] = _truthy(os.environ["TRAINYARD_TLS"])
    if os.environ.get("TRAINYARD_CA_FILE"):
        out["ca_file"] = os.environ["TRAINYARD_CA_FILE"]
    return out


def resolve(target: Optional[str] = None, token: Optional[str] = None,
            tenant: Optional[str] = None, context: Optional[str] = None,
            tls: Optional[bool] = None, ca_file: Optional[str] = None,
            config: Optional[ConfigFile] = None) -> Settings:
    """Resolves the connection settings (see the module docstring for the precedence)."""
    values: dict = {}
    cfg = config if config is not None else ConfigFile.load()
    env = _from_env()
    explicit_context = context
    ctx_name = context or os.environ.get("TRAINYARD_CONTEXT") or cfg.current_context
    ctx_values = {}
    if ctx_name:
        if ctx_name in cfg.contexts or explicit_context or os.environ.get("TRAINYARD_CONTEXT"):
            ctx_values = _from_context(cfg.context(ctx_name), cfg.path)
    if explicit_context:
        values.update(env)
        values.update(ctx_values)
    else:
        values.update(ctx_values)
        values.update(env)
    for key, value in (("target", target), ("token", token), ("tenant", tenant),
                       ("tls", tls), ("ca_file", ca_file)):
        if value is not None:
            values[key] = value
    s = Settings(context=ctx_name or "")
    for key, value in values.items():
        setattr(s, key, value)
    if s.tenant.startswith("tenants/"):
        s.tenant = s.tenant[len("tenants/"):]
    return s
