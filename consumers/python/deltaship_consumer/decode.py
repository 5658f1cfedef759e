"""One Kafka record or JetStream message to a step of the consumer protocol, or the reason it
is bad, by the rules every consumer of the repository shares (vectors/README.md, "Decoding a
record"), which are those of `deltaship rebuild`.

Binary mode: attributes are ``ce_`` headers (Kafka, raw UTF-8 values; the data's content
type is ``ce_datacontenttype`` or else ``content-type``) or ``ce-`` headers (NATS,
percent-encoded values; ``ce-datacontenttype``), names compared without case, the last of
repeated names counting. Structured mode (``content-type: application/cloudevents+json``):
the value is the whole event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .jsontext import MAX_RECORD_BYTES, JsonProblem, parse
from .patch import NotAPatch, operations

PREFIX = "dev.deltaship."
JSON_PATCH = "application/json-patch+json"
STRUCTURED = "application/cloudevents+json"
CHANGES = {"object.added": "added", "object.updated": "updated", "object.synced": "synced", "object.deleted": "deleted"}


class BadRecord(Exception):
    """A record the protocol cannot apply: ``reason`` is one of vectors/README.md's."""

    def __init__(self, reason: str, problem: str) -> None:
        super().__init__(f"{reason}: {problem}")
        self.reason = reason
        self.problem = problem


@dataclass
class Marker:
    started: bool
    sync_id: str
    full: bool
    resource: str
    namespace: str | None
    # A ``completed``'s ``state``: (count, digest as an int), or None.
    state: tuple[int, int] | None = None


@dataclass
class Object:
    change: str
    resource: str
    key: str
    # The whole object, a patch's operations, or None for ``deleted``.
    content: Any
    is_patch: bool
    # The ``uid`` and ``resourceversion`` extensions ("" when absent).
    uid: str = ""
    resource_version: str = ""


@dataclass
class Received:
    id: str
    cluster: str
    partition: int
    body: Marker | Object


# What a record is when it is not an event of the contract.
TOMBSTONE = "tombstone"
FOREIGN = "foreign"


def _bytes(v: bytes | str) -> bytes:
    return v.encode("utf-8") if isinstance(v, str) else v


def percent_decode(b: bytes) -> bytes:
    """Undoes the NATS binding's percent-encoding: ``%XX`` is a byte, anything else stays."""
    out, i = bytearray(), 0
    while i < len(b):
        pair = b[i + 1 : i + 3]
        if b[i] == 0x25 and len(pair) == 2 and all(c in b"0123456789abcdefABCDEF" for c in pair):
            out.append(int(pair, 16))
            i += 3
        else:
            out.append(b[i])
            i += 1
    return bytes(out)


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    return "an array" if isinstance(v, list) else "an object"


def _parse(value: bytes) -> Any:
    try:
        return parse(value)
    except JsonProblem as e:
        raise BadRecord(e.reason, str(e)) from None


def decode(nats: bool, headers: Iterable[tuple[bytes | str, bytes | str | None]], value: bytes | None, partition: int) -> Received | str:
    """The step of one record: a Received event, TOMBSTONE or FOREIGN; or BadRecord.
    ``value`` is None for a Kafka tombstone; ``partition`` is 0 for NATS."""
    if value is None:
        return TOMBSTONE
    if len(value) == 0:
        raise BadRecord("empty", "the value is empty")
    if len(value) > MAX_RECORD_BYTES:
        raise BadRecord("too_large", f"the value is {len(value)} bytes, more than {MAX_RECORD_BYTES}")
    table: dict[bytes, bytes] = {}
    for name, v in headers:
        if v is not None:
            table[_bytes(name).lower()] = _bytes(v)

    def header(name: str) -> str | None:
        raw = table.get(name.encode())
        if raw is None:
            return None
        try:
            return (percent_decode(raw) if nats else raw).decode("utf-8")
        except UnicodeDecodeError:
            raise BadRecord("wrong_type", f"header {name} is not UTF-8") from None

    content_type = header("content-type")
    if content_type is not None and content_type.startswith(STRUCTURED):
        event = _parse(value)
        if not isinstance(event, dict):
            raise BadRecord("wrong_type", f"the structured event is {_kind(event)}, not a JSON object")

        def text(name: str) -> str | None:
            v = event.get(name)
            if v is None or isinstance(v, str):
                return v
            raise BadRecord("wrong_type", f"attribute {name} is {_kind(v)}, not a string")

        return _event(text, lambda: event.get("data"), partition)
    prefix = "ce-" if nats else "ce_"

    def attribute(name: str) -> str | None:
        found = header(prefix + name)
        return content_type if found is None and name == "datacontenttype" else found

    return _event(attribute, lambda: _parse(value), partition)


def _event(attribute: Callable[[str], str | None], data: Callable[[], Any], partition: int) -> Received | str:
    def required(name: str) -> str:
        v = attribute(name)
        if not v:
            raise BadRecord("missing_attribute", f"no {name} attribute")
        return v

    ty = required("type")
    short = ty[len(PREFIX) :] if ty.startswith(PREFIX) else None
    if short not in CHANGES and short not in ("sync.started", "sync.completed"):
        return FOREIGN
    id = required("id")
    cluster = attribute("cluster") or ""
    d = data()
    if short not in CHANGES:
        return Received(id, cluster, partition, _marker(short == "sync.started", d))
    change = CHANGES[short]
    resource = f"{required('apiversion')}/{required('kind')}"
    key = required("subject")
    if change == "deleted":
        content, is_patch = None, False
    elif d is None:
        raise BadRecord("missing_attribute", "no data")
    elif attribute("datacontenttype") == JSON_PATCH:
        try:
            content, is_patch = operations(d), True
        except NotAPatch as e:
            raise BadRecord("wrong_type", str(e)) from None
    elif not isinstance(d, dict):
        raise BadRecord("wrong_type", f"the data is {_kind(d)}, not an object")
    else:
        content, is_patch = d, False
    # The count-and-digest term's identity: absent is "".
    uid, rv = attribute("uid") or "", attribute("resourceversion") or ""
    return Received(id, cluster, partition, Object(change, resource, key, content, is_patch, uid, rv))


def _marker(started: bool, data: Any) -> Marker:
    if data is None:
        raise BadRecord("missing_attribute", "a marker without data")

    def field(path: tuple[str, ...], required: bool) -> str | None:
        v = data
        for name in path:
            v = v.get(name) if isinstance(v, dict) else None
        if v is None:
            if required:
                raise BadRecord("missing_attribute", f"a marker without /{'/'.join(path)}")
            return None
        if not isinstance(v, str):
            raise BadRecord("wrong_type", f"a marker's /{'/'.join(path)} is {_kind(v)}, not a string")
        return v

    sync_id = field(("syncId",), True)
    version = field(("resource", "version"), True)
    kind = field(("resource", "kind"), True)
    group = field(("resource", "group"), False)
    apiversion = f"{group}/{version}" if group else version
    full = field(("mode",), False) == "full"
    return Marker(started, sync_id, full, f"{apiversion}/{kind}", field(("namespace",), False), None if started else _state(data))


HEX = frozenset("0123456789abcdef")


def _state(data: dict) -> tuple[int, int] | None:
    """A ``completed``'s ``state``: absent or null, or ``{"count": <integer from 0>,
    "digest": "<32 lowercase hex digits>"}`` (a member absent: missing_attribute; anything
    else: wrong_type)."""
    state = data.get("state")
    if state is None:
        return None
    if not isinstance(state, dict):
        raise BadRecord("wrong_type", f"a marker's /state is {_kind(state)}, not an object")
    count, digest = state.get("count"), state.get("digest")
    if count is None:
        raise BadRecord("missing_attribute", "a marker without /state/count")
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count < 1 << 64:
        raise BadRecord("wrong_type", f"a marker's /state/count is {count!r}, not an integer from 0")
    if digest is None:
        raise BadRecord("missing_attribute", "a marker without /state/digest")
    if not isinstance(digest, str) or len(digest) != 32 or not set(digest) <= HEX:
        raise BadRecord("wrong_type", f"a marker's /state/digest is {digest!r}, not 32 lowercase hex digits")
    return count, int(digest, 16)
