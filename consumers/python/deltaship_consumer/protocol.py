"""The consumer protocol of deltaship's event contract (vectors/README.md), as
`deltaship rebuild` runs it.

1. Skip a repeat of an event already applied on this partition (``repeats.py``: the last
   event of its object or marker scope, or one of the latest ids); apply only the events of
   the cluster being rebuilt (when one is set).
2. ``object.added``, ``.updated``, ``.synced``: store the data under (resource, key);
   an ``updated`` with ``application/json-patch+json`` data is a JSON Patch to apply to the
   stored object.
3. ``object.deleted``: remove the key.
4. ``sync.started`` of a full sync: open it (per partition and sync id) for its resource and
   namespace scope; object events of that resource and cluster mark their key touched. On
   the matching ``sync.completed``: remove the keys of that resource and cluster, within the
   scope, that live on this partition and were not touched.
5. Tombstones and events of other types are ignored.
7. A ``sync.completed`` with ``state`` (count and digest, event contract §4) is checked once
   applied against the objects held of its resource, cluster and namespace scope on its
   partition: counted in ``verified`` or ``mismatched``, told to ``on_check`` (a ``Check``),
   and a mismatch reported (``state mismatch at marker ...``).

Kafka sends markers to every partition and each object to one, so the protocol runs per
partition; JetStream is partition 0. A record that cannot be applied raises BadRecord and
leaves the state as it was; a patch that does not apply also marks its object stale, and
later patches to it are refused until its next whole object or delete.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, TextIO

from .decode import FOREIGN, TOMBSTONE, BadRecord, Marker, Received, decode
from .patch import NotApplied, patched
from .repeats import DEFAULT_REPEAT_WINDOW, Window
from .snapshot import load, restore, snapshot_of, write_atomically

DEFAULT_SAVE_EVERY = 10_000
"""How many records a ``Consumer`` with a ``snapshot`` file advances past between two saves
by default: each save writes the whole state and repeat window."""


class Listener:
    """What a consumer is told, as the state changes. Override what you need."""

    def upsert(self, resource: str, key: str, obj: Any) -> None:
        """An object stored or replaced: ``resource`` is ``apiVersion/Kind``."""

    def delete(self, resource: str, key: str) -> None:
        """An object removed, by a delete event or by a full sync's completed marker."""

    def synced(self, resource: str, namespace: str | None) -> None:
        """A full sync of ``resource`` (in ``namespace``, or all) was completed."""


def term(key: str, uid: str, resource_version: str) -> int:
    """An object's term: the first 16 bytes of SHA-256(key "\\n" uid "\\n" resourceVersion),
    big-endian."""
    return int.from_bytes(hashlib.sha256(f"{key}\n{uid}\n{resource_version}".encode("utf-8")).digest()[:16], "big")


@dataclass(frozen=True)
class Check:
    """A marker's count and digest compared with the state held at it; digests as 32
    lowercase hex digits; ``namespace`` None for all namespaces."""

    sync_id: str
    cluster: str
    resource: str
    namespace: str | None
    partition: int
    expected_count: int
    expected_digest: str
    held_count: int
    held_digest: str

    @property
    def ok(self) -> bool:
        return (self.expected_count, self.expected_digest) == (self.held_count, self.held_digest)

    def __str__(self) -> str:
        scope = "all namespaces" if self.namespace is None else f"namespace {self.namespace}"
        return (
            f"marker {self.sync_id} of {self.resource} in {scope} on partition {self.partition} (cluster {self.cluster}): "
            f"expected count {self.expected_count} digest {self.expected_digest}, held count {self.held_count} digest {self.held_digest}"
        )


_STDERR: Any = object()


@dataclass
class _Sync:
    cluster: str
    resource: str
    namespace: str | None
    touched: set[str] = field(default_factory=set)


class Consumer:
    """Runs the protocol and keeps the state: ``state[resource][key] = object``;
    ``skipped[reason]`` counts the records skipped as bad (see ``skip``); ``verified`` and
    ``mismatched`` count the ``sync.completed`` markers whose count and digest matched the
    state held, or did not. ``on_check(check)`` is called with each marker checked;
    mismatches are reported to ``report`` (stderr by default, None for silence).
    ``repeat_window``: how many of the latest event ids are remembered to skip repeats,
    beside the last id of each object and marker scope held.

    Positions and snapshots: ``advance(source, partition, next)`` records where the next
    record of a Kafka topic's partition (or a JetStream stream's, partition 0) is, after a
    record was applied or skipped (the readers call it); ``position(source, partition)``
    gives it back, and the readers start there. ``save()`` writes the state, the protocol's
    memory (the ids that tell repeats, open syncs, stale objects, counts) and the positions
    to the ``snapshot`` file at once, atomically; with a ``snapshot`` file, ``advance``
    saves every ``save_every`` records. ``Consumer.resume(snapshot)`` starts from it."""

    def __init__(
        self,
        listener: Listener | None = None,
        cluster: str | None = None,
        on_check: Callable[[Check], None] | None = None,
        report: TextIO | None = _STDERR,
        repeat_window: int = DEFAULT_REPEAT_WINDOW,
        snapshot: str | os.PathLike[str] | None = None,
        save_every: int = DEFAULT_SAVE_EVERY,
    ) -> None:
        if save_every < 1:
            raise ValueError(f"save_every={save_every}: give at least 1 (records between two saves)")
        self.snapshot = snapshot
        self.save_every = save_every
        self._positions: dict[str, dict[int, int]] = {}
        self._unsaved = 0
        self.listener = listener or Listener()
        self.cluster = cluster
        self.on_check = on_check
        self._report = report
        self.state: dict[str, dict[str, Any]] = {}
        self.skipped: dict[str, int] = {}
        self.verified = 0
        self.mismatched = 0
        # (resource, key) -> (partition, cluster, term, id of its last event)
        self._homes: dict[tuple[str, str], tuple[int, str, int, str]] = {}
        self._open: dict[tuple[int, str], _Sync] = {}
        self._window = Window(repeat_window)
        # (partition, cluster, resource, namespace, full, started) -> id of its last marker:
        # the marker key deltaship sends under, where a marker's repeats come.
        self._markers: dict[tuple[int, str, str, str | None, bool, bool], str] = {}
        self._stale: set[tuple[str, str]] = set()
        self.duplicates = 0

    @classmethod
    def resume(
        cls,
        snapshot: str | os.PathLike[str],
        listener: Listener | None = None,
        cluster: str | None = None,
        on_check: Callable[[Check], None] | None = None,
        report: TextIO | None = _STDERR,
        repeat_window: int = DEFAULT_REPEAT_WINDOW,
        save_every: int = DEFAULT_SAVE_EVERY,
    ) -> Consumer:
        """The consumer saved in the file ``snapshot``, saving there again, or a new one when
        there is no such file yet. The listener is not told of the state restored. Raises
        ValueError when the file is not a snapshot, or was taken with another ``cluster``."""
        c = cls(listener, cluster, on_check, report, repeat_window, snapshot, save_every)
        doc = load(snapshot)
        if doc is not None:
            try:
                restore(c, doc, os.fspath(snapshot))
            except (KeyError, TypeError, AttributeError) as e:
                raise ValueError(f"{os.fspath(snapshot)} is not a snapshot (it lacks {e})") from None
        return c

    def position(self, source: str, partition: int) -> int | None:
        """The offset (JetStream: stream sequence) of the next record to read of ``source``'s
        ``partition``; None when none was read."""
        return self._positions.get(source, {}).get(partition)

    def advance(self, source: str, partition: int, next: int) -> None:
        """Records that the records of ``source``'s ``partition`` before ``next`` were applied
        (or skipped); saves the snapshot when ``save_every`` records passed since the last."""
        self._positions.setdefault(source, {})[partition] = next
        self._unsaved += 1
        if self.snapshot is not None and self._unsaved >= self.save_every:
            self.save()

    def save(self, path: str | os.PathLike[str] | None = None) -> None:
        """Writes the snapshot (state, protocol memory, positions) to ``path`` (default: the
        ``snapshot`` file) atomically: a crash leaves the previous snapshot or this one."""
        path = path if path is not None else self.snapshot
        if path is None:
            raise ValueError("no snapshot file to save to: give save(path), or Consumer(snapshot=path)")
        write_atomically(path, json.dumps(snapshot_of(self), allow_nan=False, separators=(",", ":")))
        self._unsaved = 0

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
        if self._repeated(step):
            self.duplicates += 1
            return
        self._window.add((step.partition, step.id))
        body = step.body
        if isinstance(body, Marker):
            self._markers[_scope(body, step.cluster, step.partition)] = step.id
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
            home = self._homes.get(slot)
            if home is not None:
                # A patch refused below is still the object's latest event.
                self._homes[slot] = (*home[:3], step.id)
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
        self._homes[slot] = (step.partition, step.cluster, term(key, body.uid, body.resource_version), step.id)
        self.listener.upsert(resource, key, obj)

    def _repeated(self, step: Received) -> bool:
        """Whether ``step`` repeats an event already applied: a repeat never arrives after a
        newer event of the same key, so it is the last event of its object (or marker scope)
        when that is still held, and else one of the latest ids."""
        if (step.partition, step.id) in self._window:
            return True
        body = step.body
        if isinstance(body, Marker):
            return self._markers.get(_scope(body, step.cluster, step.partition)) == step.id
        home = self._homes.get((body.resource, body.key))
        return home is not None and home[0] == step.partition and home[1] == step.cluster and home[3] == step.id

    def _marker(self, m: Marker, cluster: str, partition: int) -> None:
        slot = (partition, m.sync_id)
        if m.started:
            if m.full:
                self._open[slot] = _Sync(cluster, m.resource, m.namespace)
            return
        sync = self._open.pop(slot, None)
        if sync is not None:
            for key in list(self.state.get(sync.resource, {})):
                home = self._homes.get((sync.resource, key))
                if _in_scope(key, sync.namespace) and key not in sync.touched and home is not None and home[:2] == (partition, sync.cluster):
                    self._remove(sync.resource, key)
            self.listener.synced(sync.resource, sync.namespace)
        if m.state is not None:
            self._check(m, cluster, partition)

    def _check(self, m: Marker, cluster: str, partition: int) -> None:
        assert m.state is not None
        count, digest = 0, 0
        for key in self.state.get(m.resource, {}):
            home = self._homes.get((m.resource, key))
            if _in_scope(key, m.namespace) and home is not None and home[:2] == (partition, cluster):
                count += 1
                digest = (digest + home[2]) % (1 << 128)
        check = Check(m.sync_id, cluster, m.resource, m.namespace, partition, m.state[0], format(m.state[1], "032x"), count, format(digest, "032x"))
        if check.ok:
            self.verified += 1
        else:
            self.mismatched += 1
            report = sys.stderr if self._report is _STDERR else self._report
            if report is not None:
                print(f"state mismatch at {check}", file=report)
        if self.on_check is not None:
            self.on_check(check)

    def _remove(self, resource: str, key: str) -> None:
        objects = self.state.get(resource, {})
        self._stale.discard((resource, key))
        if key in objects:
            del objects[key]
            self._homes.pop((resource, key), None)
            self.listener.delete(resource, key)
        if not objects:
            self.state.pop(resource, None)


def _scope(m: Marker, cluster: str, partition: int) -> tuple[int, str, str, str | None, bool, bool]:
    return (partition, cluster, m.resource, m.namespace, m.full, m.started)


def _in_scope(key: str, namespace: str | None) -> bool:
    """Whether ``key`` is within a marker's namespace scope (None: all namespaces)."""
    return namespace is None or "/" in key and key.split("/", 1)[0] == namespace
