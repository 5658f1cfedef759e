"""Snapshots: a consumer's state, its protocol memory and its positions in the stream, in
one JSON file replaced atomically (written to a temporary file beside it, flushed to disk,
then renamed over it, and the directory flushed), so that a consumer killed at any moment
restarts from one consistent point: what it had applied, what it remembers to skip repeats,
and where each partition's next record is. The format (``SNAPSHOT_FORMAT``) is
docs/consumers/README.md's "Resuming from a snapshot"."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .protocol import Consumer

SNAPSHOT_FORMAT = 1
"""The version of the snapshot file's format this library writes and reads."""


def write_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Replaces the file at ``path`` with ``text``: at any moment the file is either the old
    one or the new one, complete, also after a crash of the process or of the host."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    # The rename itself is durable once the directory is.
    d = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(d)
    finally:
        os.close(d)


def snapshot_of(c: Consumer) -> dict[str, Any]:
    """The document a snapshot file holds for ``c``."""
    from . import CONTRACT_VERSION

    previous, current = c._window.generations()
    return {
        "snapshot": SNAPSHOT_FORMAT,
        "contract": CONTRACT_VERSION,
        "cluster": c.cluster,
        "positions": {source: {str(p): n for p, n in parts.items()} for source, parts in c._positions.items()},
        "state": c.state,
        "objects": [
            {"resource": r, "key": k, "partition": p, "cluster": cl, "term": format(t, "032x"), "id": i} for (r, k), (p, cl, t, i) in c._homes.items()
        ],
        "stale": [{"resource": r, "key": k} for r, k in c._stale],
        "syncs": [
            {"partition": p, "syncId": sid, "cluster": s.cluster, "resource": s.resource, "namespace": s.namespace, "touched": sorted(s.touched)}
            for (p, sid), s in c._open.items()
        ],
        "markers": [
            {"partition": p, "cluster": cl, "resource": r, "namespace": ns, "full": full, "started": started, "id": i}
            for (p, cl, r, ns, full, started), i in c._markers.items()
        ],
        "window": {"previous": _by_partition(previous), "current": _by_partition(current)},
        "duplicates": c.duplicates,
        "verified": c.verified,
        "mismatched": c.mismatched,
        "skipped": c.skipped,
    }


def restore(c: Consumer, doc: dict[str, Any], where: str) -> None:
    """Puts the snapshot ``doc`` (read from ``where``) into the new consumer ``c``."""
    from . import CONTRACT_VERSION
    from .protocol import _Sync

    if doc.get("snapshot") != SNAPSHOT_FORMAT:
        raise ValueError(f"{where} is not a snapshot of format {SNAPSHOT_FORMAT} (it says {doc.get('snapshot')!r}): take a new one with this library")
    if doc.get("contract") != CONTRACT_VERSION:
        raise ValueError(f"{where} was taken under event contract {doc.get('contract')!r}; this library reads contract {CONTRACT_VERSION}")
    if doc.get("cluster") != c.cluster:
        raise ValueError(f"{where} was taken with cluster {doc.get('cluster')!r}: resume it with cluster={doc.get('cluster')!r}, or start a new snapshot")
    c._positions = {source: {int(p): n for p, n in parts.items()} for source, parts in doc["positions"].items()}
    c.state = doc["state"]
    c._homes = {(o["resource"], o["key"]): (o["partition"], o["cluster"], int(o["term"], 16), o["id"]) for o in doc["objects"]}
    c._stale = {(s["resource"], s["key"]) for s in doc["stale"]}
    c._open = {(s["partition"], s["syncId"]): _Sync(s["cluster"], s["resource"], s["namespace"], set(s["touched"])) for s in doc["syncs"]}
    c._markers = {(m["partition"], m["cluster"], m["resource"], m["namespace"], m["full"], m["started"]): m["id"] for m in doc["markers"]}
    c._window.restore(_ids(doc["window"]["previous"]), _ids(doc["window"]["current"]))
    c.duplicates, c.verified, c.mismatched = doc["duplicates"], doc["verified"], doc["mismatched"]
    c.skipped = dict(doc["skipped"])


def _by_partition(ids: set[tuple[int, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p, i in sorted(ids):
        out.setdefault(str(p), []).append(i)
    return out


def _ids(by_partition: dict[str, list[str]]) -> set[tuple[int, str]]:
    return {(int(p), i) for p, ids in by_partition.items() for i in ids}


def load(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The snapshot document at ``path``, or None when there is no file."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as e:
        raise ValueError(f"{os.fspath(path)} is not a snapshot (not JSON: {e})") from None
