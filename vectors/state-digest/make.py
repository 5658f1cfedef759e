#!/usr/bin/env python3
"""Writes the count-and-digest vectors (vectors/state-digest/<case>/): streams whose
`sync.completed` markers carry `"state": {"count", "digest"}` (event contract §4), clean
ones every consumer verifies without a mismatch and tampered ones (an event dropped, a
digest or a count changed) every consumer must flag (vectors/README.md, "Count and
digest"). `python3 vectors/state-digest/make.py`.

The markers' figures are computed here from the definition, over the objects the bridge
holds (`truth`); the consumer's side (`held`) is the protocol applied to the records that
are written, so an event left out of the stream makes the two differ. The expected state,
skips and verification outcomes are those of `held`.
"""

import copy
import hashlib
import json
import shutil
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
T = "dev.deltaship."
PATCH = "application/json-patch+json"


def term(key, uid, rv):
    """An object's term: the first 16 bytes of SHA-256(key \\n uid \\n resourceVersion)."""
    return int.from_bytes(hashlib.sha256(f"{key}\n{uid}\n{rv}".encode("utf-8")).digest()[:16], "big")


def figures(objects):
    """{"count", "digest"} of (key, uid, resourceVersion) triples."""
    objects = list(objects)
    return {"count": len(objects), "digest": format(sum(term(*o) for o in objects) % (1 << 128), "032x")}


# Resources: (apiVersion/Kind, group, version, kind, plural).
CM = ("v1/ConfigMap", "", "v1", "ConfigMap", "configmaps")
NS = ("v1/Namespace", "", "v1", "Namespace", "namespaces")


def in_scope(key, namespace):
    return namespace is None or ("/" in key and key.split("/", 1)[0] == namespace)


class Run:
    """One stream being written (Kafka with `partitions` partitions, or NATS), with the
    bridge's objects (`truth`) and the consumer's (`held`), both
    {(cluster, resource, key): {"uid", "rv", "object", "partition"}}."""

    def __init__(self, nats, partitions=2, drop=(), tamper=None):
        self.nats = nats
        self.partitions = 1 if nats else partitions
        self.lines = []
        self.offsets = {}
        self.ids = 0
        self.truth = {}
        self.held = {}
        self.open = {}  # (partition, syncId) -> (cluster, resource, namespace, touched)
        self.seen = set()
        self.drop = set(drop)  # tags of events left out of the stream
        self.tamper = tamper or {}  # (syncId, partition) -> {"count": n} or {"digest": d}
        self.checks = {}  # cluster -> list of (syncId, partition, expected, held)
        self.skipped = {}  # cluster -> {reason: n}, written by hand

    def partition_of(self, key):
        return 0 if self.nats else zlib.crc32(key.encode()) % self.partitions

    def write(self, headers, value, partition, key):
        if self.nats:
            self.lines.append({"stream": "DIGEST", "sequence": len(self.lines) + 1, "subject": f"digest.{key}", "headers": headers, "data": value})
        else:
            offset = self.offsets.get(partition, 0)
            self.offsets[partition] = offset + 1
            self.lines.append({"topic": "digest.configmaps", "partition": partition, "offset": offset, "key": key, "headers": headers, "value": value})

    def headers(self, ty, id, cluster, resource, subject=None, content_type="application/json", **ext):
        p = "ce-" if self.nats else "ce_"
        api, kind = resource[0].rsplit("/", 1)
        h = [[f"{p}specversion", "1.0"], [f"{p}id", id], [f"{p}source", f"//{cluster}/api/v1/{resource[4]}"], [f"{p}type", T + ty]]
        if subject is not None:
            h.append([f"{p}subject", subject])
        h += [[f"{p}cluster", cluster], [f"{p}apiversion", api], [f"{p}kind", kind]]
        h += [[f"{p}{k}", v] for k, v in ext.items()]
        h.append(["ce-datacontenttype" if self.nats else "content-type", content_type])
        return h

    def next_id(self):
        self.ids += 1
        return f"e{self.ids}"

    # The consumer's side: the protocol on what is written.
    def _touch(self, partition, cluster, resource, key):
        for (p, _), (c, r, _, touched) in self.open.items():
            if c == cluster and r == resource[0]:
                touched.add(key)

    def object(self, change, cluster, resource, key, obj=None, uid=None, rv=None, tag=None, patch=None, repeat=False):
        """An object event; `truth` follows it whether it is written or dropped (`tag` in drop)."""
        slot = (cluster, resource[0], key)
        partition = self.partition_of(key)
        if change == "deleted":
            self.truth.pop(slot, None)
        else:
            self.truth[slot] = {"uid": uid, "rv": rv, "object": obj, "partition": partition}
        if tag in self.drop:
            return
        id = self.next_id()
        data = patch if patch is not None else (obj if obj is not None else self.held.get(slot, {}).get("object", {}))
        headers = self.headers(f"object.{change}", id, cluster, resource, subject=key, content_type=PATCH if patch is not None else "application/json", uid=uid, resourceversion=rv)
        for _ in range(2 if repeat else 1):
            self.write(headers, json.dumps(data, separators=(",", ":")), partition, key)
        self._touch(partition, cluster, resource, key)
        if change == "deleted":
            self.held.pop(slot, None)
        elif patch is not None:
            assert slot in self.held, "a patch needs the object held"
            self.held[slot] = {"uid": uid, "rv": rv, "object": obj, "partition": partition}
        else:
            self.held[slot] = {"uid": uid, "rv": rv, "object": obj, "partition": partition}

    def marker(self, phase, cluster, resource, sync, mode="full", namespace=None, reason="initial", state=True):
        """A marker, copied to every partition; `completed` carries each copy's figures."""
        for p in range(self.partitions):
            data = {"syncId": sync, "reason": reason, "mode": mode, "resource": {"group": resource[1], "version": resource[2], "kind": resource[3], "plural": resource[4]}, "resourceVersion": "100"}
            if namespace is not None:
                data["namespace"] = namespace
            if phase == "completed" and state:
                mine = lambda s: s[0] == cluster and s[1] == resource[0] and in_scope(s[2], namespace)  # noqa: E731
                expected = figures((k, o["uid"], o["rv"]) for (c, r, k), o in self.truth.items() if mine((c, r, k)) and o["partition"] == p)
                expected.update(self.tamper.get((sync, p), {}))
                data["state"] = expected
            id = f"m-{sync}-{phase}"
            self.write(self.headers(f"sync.{phase}", id, cluster, resource, syncid=sync), json.dumps(data, separators=(",", ":")), p, f"/deltaship/sync/{resource[4]}/{sync}/{phase}")
            # The consumer: open, or sweep and check.
            if phase == "started":
                if mode == "full":
                    self.open[(p, sync)] = (cluster, resource[0], namespace, set())
                continue
            sweep = self.open.pop((p, sync), None)
            if sweep is not None:
                for slot in [s for s, o in self.held.items() if s[0] == cluster and s[1] == resource[0] and in_scope(s[2], namespace) and o["partition"] == p and s[2] not in sweep[3]]:
                    del self.held[slot]
            if state:
                held = figures((k, o["uid"], o["rv"]) for (c, r, k), o in self.held.items() if c == cluster and r == resource[0] and in_scope(k, namespace) and o["partition"] == p)
                self.checks.setdefault(cluster, []).append((sync, p, data["state"], held))

    def bad_marker(self, cluster, resource, sync, id, state, mode="full", namespace="ns"):
        """A `completed` whose `state` is `state` as given: a record the consumer skips."""
        data = {"syncId": sync, "reason": "initial", "mode": mode, "resource": {"group": resource[1], "version": resource[2], "kind": resource[3], "plural": resource[4]}, "namespace": namespace}
        data["state"] = state
        self.write(self.headers("sync.completed", id, cluster, resource, syncid=sync), json.dumps(data, separators=(",", ":")), 0, f"/deltaship/sync/{resource[4]}/{sync}/completed")

    def expected(self, clusters):
        state = {}
        for (c, r, k), o in sorted(self.held.items()):
            state.setdefault(c, {}).setdefault(r, {})[k] = o["object"]
        out = {"clusters": {c: state.get(c, {}) for c in clusters}, "skipped": {c: self.skipped.get(c, {}) for c in clusters}, "verification": {}}
        for c in clusters:
            checks = self.checks.get(c, [])
            bad = [{"syncId": s, "partition": p, "expected": e, "held": h} for s, p, e, h in checks if e != h]
            out["verification"][c] = {"verified": len(checks) - len(bad), "mismatched": len(bad), "mismatches": bad}
        return out


def cm(name, ns, rv, v):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "resourceVersion": str(rv)}, "data": {"v": v}}


def namespace(name, rv):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "uid": f"uid-ns-{name}", "resourceVersion": str(rv)}}


def put(r, change, cluster, ns, name, rv, v, **kw):
    o = cm(name, ns, rv, v)
    if cluster != "c1":
        o["metadata"]["uid"] += f"-{cluster}"
    r.object(change, cluster, CM, f"{ns}/{name}", o, o["metadata"]["uid"], str(rv), **kw)


def scenario(r):
    """Two clusters on one topic or stream: c1 watches ConfigMaps of `ns` and of `other`
    (two watches) and Namespaces (cluster-scoped, all namespaces); c2 ConfigMaps of `ns`.
    Initial full syncs, live changes (a patch, a repeat), a relist that found no
    difference (a diff sync: its completed removes nothing, so a change missed before it
    shows), a state marker without a sync, more changes, and a full resync."""
    r.marker("started", "c1", CM, "s-init", namespace="ns")
    for i, name in enumerate("abcd"):
        put(r, "synced", "c1", "ns", name, 10 + i, "1")
    r.marker("completed", "c1", CM, "s-init", namespace="ns")
    r.marker("started", "c1", CM, "s-other", namespace="other")
    put(r, "synced", "c1", "other", "x", 20, "1")
    r.marker("completed", "c1", CM, "s-other", namespace="other")
    r.marker("started", "c1", NS, "s-ns")
    for i, name in enumerate(["ns", "other"]):
        o = namespace(name, 30 + i)
        r.object("synced", "c1", NS, name, o, o["metadata"]["uid"], str(30 + i))
    r.marker("completed", "c1", NS, "s-ns")
    r.marker("started", "c2", CM, "s-c2", namespace="ns")
    put(r, "synced", "c2", "ns", "a", 5, "c2")
    put(r, "synced", "c2", "ns", "b", 6, "c2")
    r.marker("completed", "c2", CM, "s-c2", namespace="ns")

    put(r, "added", "c1", "ns", "e", 40, "1", tag="add-e")
    put(r, "updated", "c1", "ns", "a", 41, "2", tag="update-a", repeat=True)
    r.object("deleted", "c1", CM, "ns/b", cm("b", "ns", 42, "1"), "uid-ns-b", "42", tag="delete-b")
    c = cm("c", "ns", 43, "3")
    r.object("updated", "c1", CM, "ns/c", c, "uid-ns-c", "43", patch=[{"op": "replace", "path": "/data/v", "value": "3"}, {"op": "replace", "path": "/metadata/resourceVersion", "value": "43"}], tag="patch-c")
    put(r, "updated", "c1", "other", "x", 44, "2")
    put(r, "deleted", "c2", "ns", "b", 45, "c2")

    r.marker("started", "c1", CM, "s-relist", mode="diff", namespace="ns", reason="relist")
    r.marker("completed", "c1", CM, "s-relist", mode="diff", namespace="ns", reason="relist")
    r.marker("completed", "c1", NS, "s-state", mode="diff", reason="resync")

    put(r, "updated", "c1", "ns", "d", 50, "2")
    put(r, "added", "c1", "ns", "f", 51, "1")
    put(r, "updated", "c2", "ns", "a", 52, "c2-2")
    r.marker("completed", "c2", CM, "s-c2-state", mode="diff", namespace="ns", reason="resync")

    r.marker("started", "c1", CM, "s-resync", namespace="ns", reason="resync")
    for (c_, res, key), o in sorted(r.truth.items()):
        if c_ == "c1" and res == CM[0] and key.startswith("ns/"):
            r.object("synced", "c1", CM, key, o["object"], o["uid"], o["rv"])
    r.marker("completed", "c1", CM, "s-resync", namespace="ns", reason="resync")


def malformed(r):
    """`state` members of the wrong type or form: each such `completed` is skipped, the sync
    stays open until a well-formed one; a null `state` is no state; a count of 2^64 - 1 is
    a count (that does not match)."""
    r.marker("started", "c1", CM, "s1", namespace="ns")
    put(r, "synced", "c1", "ns", "a", 10, "1")
    good = figures([("ns/a", "uid-ns-a", "10")])
    for n, state in enumerate([
        "x",
        [good],
        {"digest": good["digest"]},
        {"count": -1, "digest": good["digest"]},
        {"count": 1.0, "digest": good["digest"]},
        {"count": "1", "digest": good["digest"]},
        {"count": 18446744073709551616, "digest": good["digest"]},
        {"count": 1, "digest": good["digest"].upper()},
        {"count": 1, "digest": good["digest"][1:]},
        {"count": 1},
    ]):
        r.bad_marker("c1", CM, "s1", f"bad-{n}", state)
    r.skipped["c1"] = {"wrong_type": 8, "missing_attribute": 2}
    r.marker("completed", "c1", CM, "s1", namespace="ns")
    r.marker("started", "c1", CM, "s2", namespace="ns", reason="resync")
    put(r, "synced", "c1", "ns", "a", 10, "1")
    r.marker("completed", "c1", CM, "s2", namespace="ns", reason="resync", state=False)
    r.tamper[("s3", 0)] = {"count": 18446744073709551615}
    r.marker("completed", "c1", CM, "s3", mode="diff", namespace="ns", reason="resync")


CASES = [
    # name, what, nats, drop, tamper, mismatches expected for c1
    ("kafka-clean", "a Kafka topic of two partitions, two clusters, three watches (two namespaces, one cluster-scoped resource): every marker copy carries its own partition's figures and every consumer verifies them all", False, (), None, 0),
    ("nats-clean", "the same on a JetStream stream: each marker covers its whole scope", True, (), None, 0),
    ("kafka-dropped-delete", "a `deleted` left out: the relist's (diff) completed on that object's partition shows one object too many; the full resync later removes it and verifies", False, ("delete-b",), None, 1),
    ("kafka-dropped-update", "an `updated` left out: same count, another digest, at the relist's completed on that object's partition", False, ("update-a",), None, 1),
    ("nats-dropped-delete", "a `deleted` left out of a JetStream stream: flagged at the relist's completed", True, ("delete-b",), None, 1),
    ("kafka-wrong-digest", "a marker copy whose digest is not its partition's: flagged, the other copy verified", False, (), {("s-resync", 1): {"digest": "0" * 31 + "1"}}, 1),
    ("kafka-wrong-count", "a marker copy whose count is one more than its partition's: flagged", False, (), "count", 1),
    ("malformed-state", "a `state` that is not an object, a count that is not an integer from 0 (negative, 1.0, a string, 2^64), a digest that is not 32 lowercase hex digits, a member absent: the marker is skipped (`wrong_type`, `missing_attribute`); a null `state` is not checked; a count of 2^64 - 1 is read (and flagged)", False, (), None, 1),
]


def main():
    for old in HERE.iterdir():
        if old.is_dir():
            shutil.rmtree(old)
    rows = []
    for name, what, nats, drop, tamper, mismatches in CASES:
        if tamper == "count":
            probe = Run(nats)
            scenario(probe)
            right = next(e for s, p, e, _ in probe.checks["c1"] if s == "s-init" and p == 0)
            tamper = {("s-init", 0): {"count": right["count"] + 1}}
        r = Run(nats, partitions=1 if name == "malformed-state" else 2, drop=drop, tamper=tamper)
        (malformed if name == "malformed-state" else scenario)(r)
        # Bad records are skipped whatever their cluster: the malformed markers' case is c1's.
        expected = r.expected(["c1"] if name == "malformed-state" else ["c1", "c2"])
        got = expected["verification"]["c1"]["mismatched"]
        assert got == mismatches, f"{name}: {got} mismatches, meant {mismatches}"
        assert all(v["mismatched"] == 0 for c, v in expected["verification"].items() if c != "c1")
        if not nats and name != "malformed-state":
            assert {line["partition"] for line in r.lines if "object" in json.dumps(line["headers"])} == {0, 1}, "objects on both partitions"
        d = HERE / name
        d.mkdir()
        with open(d / ("nats.jsonl" if nats else "kafka.jsonl"), "w", encoding="utf-8") as f:
            for line in r.lines:
                f.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
        (d / "expected.json").write_text(json.dumps(expected, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        rows.append(f"| `{name}` | {what} |")
    print(f"{len(CASES)} state-digest vectors")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
