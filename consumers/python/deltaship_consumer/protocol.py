"""The consumer protocol of deltaship's event contract.

1. Skip an event whose id was already seen on this partition; apply only the events of the
   cluster being rebuilt (when one is set).
2. ``object.added``, ``.updated``, ``.synced``: store the data under (resource, key);
   an ``updated`` with ``application/json-patch+json`` data is a JSON Patch to apply to the
   stored object.
3. ``object.deleted``: remove the key.
4. ``sync.started`` of a full sync: open it (per partition and sync id) for its resource and
   namespace scope; object events of that resource and cluster mark their key touched. On
   the matching ``sync.completed``: remove the keys of that resource and cluster, within the
   scope, that live on this partition and were not touched.
5. Tombstones and events of other types are ignored.

Kafka sends markers to every partition and each object to one, so the protocol runs per
partition; JetStream is partition 0.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Iterable

import jsonpatch

from .decode import BadRecord, kafka_event, nats_event

PREFIX = "dev.deltaship."
JSON_PATCH = "application/json-patch+json"


class Listener:
    """What a consumer is told, as the state changes. Override what you need."""

    def upsert(self, resource: str, key: str, obj: Any) -> None:
        """An object stored or replaced: ``resource`` is ``apiVersion/Kind``."""

    def delete(self, resource: str, key: str) -> None:
        """An object removed, by a delete event or by a full sync's completed marker."""

    def synced(self, resource: str, namespace: str | None) -> None:
        """A full sync of ``resource`` (in ``namespace``, or all) was completed."""


@dataclass
class _Sync:
    cluster: str
    resource: str
    namespace: str | None
    touched: set[str] = field(default_factory=set)


class Consumer:
    """Runs the protocol and keeps the state: ``state[resource][key] = object``."""

    def __init__(self, listener: Listener | None = None, cluster: str | None = None) -> None:
        self.listener = listener or Listener()
        self.cluster = cluster
        self.state: dict[str, dict[str, Any]] = {}
        self._homes: dict[tuple[str, str], tuple[int, str]] = {}
        self._open: dict[tuple[int, str], _Sync] = {}
        self._seen: set[tuple[int, str]] = set()
        self.duplicates = 0

    def kafka_record(self, partition: int, key: bytes | str | None, headers: Iterable[tuple[str, bytes | str | None]], value: bytes | None) -> None:
        """Applies one Kafka record of ``partition``."""
        event = kafka_event(headers, key, value)
        if event is not None:
            self.apply(event, partition)

    def nats_message(self, headers: Iterable[tuple[str, str]], data: bytes) -> None:
        """Applies one JetStream message."""
        self.apply(nats_event(headers, data), 0)

    def apply(self, event: Any, partition: int) -> None:
        """Applies one CloudEvent (of the SDK) read from ``partition``."""
        kind = event.get_type()
        if not kind.startswith(PREFIX):
            return
        cluster = _text(event, "cluster")
        if self.cluster is not None and cluster != self.cluster:
            return
        if (partition, event.get_id()) in self._seen:
            self.duplicates += 1
            return
        self._seen.add((partition, event.get_id()))
        data = event.get_data()
        if kind in ("dev.deltaship.sync.started", "dev.deltaship.sync.completed"):
            self._marker(kind.endswith("started"), data, cluster, partition)
            return
        resource = f"{_text(event, 'apiversion')}/{_text(event, 'kind')}"
        key = event.get_subject()
        if not key:
            raise BadRecord(f"{kind} {event.get_id()} has no subject")
        for sync in self._open.values():
            if sync.resource == resource and sync.cluster == cluster:
                sync.touched.add(key)
        if kind == "dev.deltaship.object.deleted":
            self._remove(resource, key)
            return
        objects = self.state.setdefault(resource, {})
        if event.get_datacontenttype() == JSON_PATCH:
            if key not in objects:
                raise BadRecord(f"a patch for {resource} {key}, never received")
            try:
                data = jsonpatch.apply_patch(copy.deepcopy(objects[key]), data)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                raise BadRecord(f"the patch for {resource} {key} does not apply: {e}") from e
        objects[key] = data
        self._homes[(resource, key)] = (partition, cluster)
        self.listener.upsert(resource, key, data)

    def _marker(self, started: bool, data: Any, cluster: str, partition: int) -> None:
        if not isinstance(data, dict) or "syncId" not in data:
            raise BadRecord("a marker without its data")
        slot = (partition, data["syncId"])
        r = data.get("resource", {})
        resource = f"{r['group']}/{r['version']}/{r['kind']}" if r.get("group") else f"{r.get('version')}/{r.get('kind')}"
        if started:
            if data.get("mode") == "full":
                self._open[slot] = _Sync(cluster, resource, data.get("namespace"))
            return
        sync = self._open.pop(slot, None)
        if sync is None:
            return
        for key in list(self.state.get(sync.resource, {})):
            in_scope = sync.namespace is None or key.split("/", 1)[0] == sync.namespace and "/" in key
            if in_scope and key not in sync.touched and self._homes.get((sync.resource, key)) == (partition, sync.cluster):
                self._remove(sync.resource, key)
        self.listener.synced(sync.resource, sync.namespace)

    def _remove(self, resource: str, key: str) -> None:
        objects = self.state.get(resource, {})
        if objects.pop(key, None) is not None:
            self._homes.pop((resource, key), None)
            self.listener.delete(resource, key)
        if not objects:
            self.state.pop(resource, None)


def _text(event: Any, name: str) -> str:
    value = event.get_extension(name)
    return "" if value is None else str(value)
