"""The consumer protocol of deltaship's event contract (vectors/README.md), as
`deltaship rebuild` runs it.

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
partition; JetStream is partition 0. A record that cannot be applied raises BadRecord and
leaves the state as it was; a patch that does not apply also marks its object stale, and
later patches to it are refused until its next whole object or delete.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, TextIO

from .decode import FOREIGN, TOMBSTONE, BadRecord, Marker, Received, decode
from .patch import NotApplied, patched


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
    """Runs the protocol and keeps the state: ``state[resource][key] = object``;
    ``skipped[reason]`` counts the records skipped as bad (see ``skip``)."""

    def __init__(self, listener: Listener | None = None, cluster: str | None = None) -> None:
        self.listener = listener or Listener()
        self.cluster = cluster
        self.state: dict[str, dict[str, Any]] = {}
        self.skipped: dict[str, int] = {}
        self._homes: dict[tuple[str, str], tuple[int, str]] = {}
        self._open: dict[tuple[int, str], _Sync] = {}
        self._seen: set[tuple[int, str]] = set()
        self._stale: set[tuple[str, str]] = set()
        self.duplicates = 0

    def kafka_record(self, partition: int, key: bytes | str | None, headers: Iterable[tuple[bytes | str, bytes | str | None]], value: bytes | None) -> None:
        """Applies one Kafka record of ``partition``; BadRecord when it cannot be applied."""
        self._step(decode(False, headers, value, partition))

    def nats_message(self, headers: Iterable[tuple[bytes | str, bytes | str]], data: bytes) -> None:
        """Applies one JetStream message; BadRecord when it cannot be applied."""
        self._step(decode(True, headers, data, 0))

    def skip(self, where: str, bad: BadRecord, report: TextIO | None = sys.stderr) -> None:
        """Counts a record skipped as bad, and reports it (``report``: None for silence)."""
        self.skipped[bad.reason] = self.skipped.get(bad.reason, 0) + 1
        if report is not None:
            print(f"skipped record {where}: {bad}", file=report)

    def _step(self, step: Received | str) -> None:
        if step in (TOMBSTONE, FOREIGN):
            return
        assert isinstance(step, Received)
        if self.cluster is not None and step.cluster != self.cluster:
            return
        if (step.partition, step.id) in self._seen:
            self.duplicates += 1
            return
        self._seen.add((step.partition, step.id))
        body = step.body
        if isinstance(body, Marker):
            self._marker(body, step.cluster, step.partition)
            return
        resource, key = body.resource, body.key
        for sync in self._open.values():
            if sync.resource == resource and sync.cluster == step.cluster:
                sync.touched.add(key)
        slot = (resource, key)
        if body.change == "deleted":
            self._remove(resource, key)
            return
        objects = self.state.get(resource, {})
        obj = body.content
        if body.is_patch:
            if slot in self._stale:
                raise BadRecord("patch_not_applied", "the object is stale: an earlier patch to it did not apply")
            if key not in objects:
                raise BadRecord("patch_not_applied", "a patch for an object never received")
            try:
                obj = patched(objects[key], obj)
            except NotApplied as e:
                self._stale.add(slot)
                raise BadRecord("patch_not_applied", str(e)) from None
        else:
            self._stale.discard(slot)
        self.state.setdefault(resource, {})[key] = obj
        self._homes[slot] = (step.partition, step.cluster)
        self.listener.upsert(resource, key, obj)

    def _marker(self, m: Marker, cluster: str, partition: int) -> None:
        slot = (partition, m.sync_id)
        if m.started:
            if m.full:
                self._open[slot] = _Sync(cluster, m.resource, m.namespace)
            return
        sync = self._open.pop(slot, None)
        if sync is None:
            return
        for key in list(self.state.get(sync.resource, {})):
            in_scope = sync.namespace is None or "/" in key and key.split("/", 1)[0] == sync.namespace
            if in_scope and key not in sync.touched and self._homes.get((sync.resource, key)) == (partition, sync.cluster):
                self._remove(sync.resource, key)
        self.listener.synced(sync.resource, sync.namespace)

    def _remove(self, resource: str, key: str) -> None:
        objects = self.state.get(resource, {})
        self._stale.discard((resource, key))
        if key in objects:
            del objects[key]
            self._homes.pop((resource, key), None)
            self.listener.delete(resource, key)
        if not objects:
            self.state.pop(resource, None)
