"""API keys and tenants: who is calling, what they may use, and which prefix-cache namespace they live in.

`--api-key K` gives one key (tenant ``default``, shared cache, admin). `--api-keys FILE` (JSON or TOML) gives
each key its own limits and cache namespace::

    {"keys": [{"key": "sk-alice", "name": "alice", "requests_per_minute": 60, "tokens_per_minute": 20000,
               "max_concurrent_requests": 4, "namespace": "alice", "admin": false}]}

or in TOML ``[[keys]]`` tables with the same fields. ``namespace`` defaults to the tenant name, so tenants never
see (or time) each other's cached prefixes. Keys are kept only as SHA-256 digests and compared in constant time.
Limits are token buckets refilled continuously; a request over a limit gets 429 with `Retry-After`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sprig.runtime.server.http_common import APIError, ErrorType

ANONYMOUS = "anonymous"


class LimitKind(str, Enum):
    REQUESTS_PER_MINUTE = "requests_per_minute"
    TOKENS_PER_MINUTE = "tokens_per_minute"
    CONCURRENT = "max_concurrent_requests"


class KeyEntry(BaseModel):
    """One entry of the keys file."""

    model_config = ConfigDict(extra="forbid", strict=True)
    key: str = Field(min_length=8)
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)
    max_concurrent_requests: int | None = Field(None, ge=1)
    namespace: str | None = None
    admin: bool = False


class KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    keys: list[KeyEntry]


class TokenBucket:
    """A bucket of `capacity` units refilled at capacity per minute; it may go negative (token debits)."""

    def __init__(self, per_minute: int) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.level = self.capacity
        self.updated = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        self.updated = now

    def wait_time(self, amount: float = 1.0) -> float:
        """Seconds until `amount` units are available (0: now)."""
        self._refill()
        return 0.0 if self.level >= amount else (amount - self.level) / self.rate

    def take(self, amount: float) -> None:
        self._refill()
        self.level -= amount


@dataclass(eq=False)
class Tenant:
    """A caller identity with its limits and usage counters."""

    name: str
    namespace: str = ""
    admin: bool = False
    max_concurrent: int | None = None
    requests: TokenBucket | None = None
    tokens: TokenBucket | None = None
    active: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self) -> None:
        """Count one request against the limits, or raise 429 with the wait in Retry-After."""
        with self.lock:
            if self.max_concurrent is not None and self.active >= self.max_concurrent:
                raise _limited(self, LimitKind.CONCURRENT, 1.0)
            for kind, bucket in ((LimitKind.REQUESTS_PER_MINUTE, self.requests),
                                 (LimitKind.TOKENS_PER_MINUTE, self.tokens)):
                wait = bucket.wait_time(1.0) if bucket else 0.0  # why: tokens: at least one left in the budget
                if wait > 0:
                    raise _limited(self, kind, wait)
            if self.requests is not None:
                self.requests.take(1.0)
            self.active += 1

    def release(self, generated_tokens: int) -> None:
        """The request ended: free its concurrency slot and debit the tokens it generated."""
        with self.lock:
            self.active = max(0, self.active - 1)
            if self.tokens is not None:
                self.tokens.take(generated_tokens)


class RateLimited(APIError):
    """429 for one tenant and one limit."""

    def __init__(self, tenant: str, kind: LimitKind, wait: float) -> None:
        super().__init__(429, f"rate limit exceeded for {tenant}: {kind.value}", ErrorType.RATE_LIMIT, None,
                         "rate_limit_exceeded", {"Retry-After": str(max(1, math.ceil(wait)))})
        self.tenant = tenant
        self.kind = kind


def _limited(tenant: Tenant, kind: LimitKind, wait: float) -> RateLimited:
    return RateLimited(tenant.name, kind, wait)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def _tenant_of(entry: KeyEntry) -> Tenant:
    return Tenant(
        name=entry.name,
        namespace=entry.namespace if entry.namespace is not None else entry.name,
        admin=entry.admin,
        max_concurrent=entry.max_concurrent_requests,
        requests=TokenBucket(entry.requests_per_minute) if entry.requests_per_minute else None,
        tokens=TokenBucket(entry.tokens_per_minute) if entry.tokens_per_minute else None,
    )


def load_keys_file(path: str | Path) -> list[KeyEntry]:
    """Parse a JSON or TOML keys file (chosen by extension, JSON otherwise); raises ValueError with one line."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ValueError(f"cannot read the API keys file {p}: {e.strerror}") from None
    try:
        data = _load_toml(text) if p.suffix.lower() == ".toml" else json.loads(text)
        entries = KeysFile.model_validate(data).keys
    except ValueError as e:  # JSON, TOML (TOMLDecodeError is a ValueError) and validation errors
        first = e.errors()[0] if isinstance(e, ValidationError) else None
        detail = f"{'.'.join(map(str, first['loc']))}: {first['msg']}" if first else str(e).splitlines()[0]
        raise ValueError(f"invalid API keys file {p}: {detail}") from None
    names = [e.name for e in entries]
    if len(set(names)) != len(names) or len({e.key for e in entries}) != len(entries):
        raise ValueError(f"invalid API keys file {p}: names and keys must be unique")
    return entries


def _load_toml(text: str) -> object:
    try:
        import tomllib
    except ImportError:  # why: Python 3.10 has no tomllib
        import tomli as tomllib
    return tomllib.loads(text)


class Authenticator:
    """Maps a bearer token to its tenant; with no keys configured everyone is the anonymous tenant."""

    def __init__(self, api_key: str | None = None, entries: list[KeyEntry] | None = None) -> None:
        self.keys: list[tuple[bytes, Tenant]] = []
        if api_key:
            self.keys.append((_digest(api_key), Tenant("default", namespace="", admin=True)))
        for entry in entries or []:
            self.keys.append((_digest(entry.key), _tenant_of(entry)))
        self.anonymous = Tenant(ANONYMOUS, namespace="", admin=True)

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    @property
    def tenants(self) -> list[Tenant]:
        return [t for _, t in self.keys]

    def authenticate(self, authorization: str | None) -> Tenant:
        """The tenant of an `Authorization: Bearer <key>` header, or 401."""
        if not self.enabled:
            return self.anonymous
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        digest = _digest(token.strip())
        found: Tenant | None = None
        for known, tenant in self.keys:  # why: compare against every key so timing reveals nothing
            if hmac.compare_digest(known, digest):
                found = tenant
        if found is None:
            raise unauthorized("invalid API key")
        return found


def unauthorized(message: str) -> APIError:
    return APIError(401, message, ErrorType.AUTHENTICATION, None, "invalid_api_key",
                    {"WWW-Authenticate": "Bearer"})


def forbidden(message: str) -> APIError:
    return APIError(403, message, ErrorType.PERMISSION, None, "admin_required")
