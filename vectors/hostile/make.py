#!/usr/bin/env python3
"""Writes the hostile vectors (vectors/hostile/<case>/): recorded streams of records no bridge
ships, each with the state and the skip counts every consumer must end with
(vectors/README.md, "Hostile vectors"). The expectations are written here by hand, from the
rules of vectors/README.md, not recorded from a consumer: `python3 vectors/hostile/make.py`.
"""

import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLUSTER = "c1"
SOURCE = "//c1/api/v1/configmaps"
T = "dev.deltaship."
PATCH = "application/json-patch+json"
STRUCTURED = "application/cloudevents+json; charset=UTF-8"


def cm(name, rv, ns="ns", **fields):
    """A ConfigMap as the bridge ships it; `fields` beside metadata (data, spec...)."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv)}, **fields}


def marker_data(sync, mode="full", namespace="ns", **over):
    d = {"syncId": sync, "reason": "initial", "mode": mode, "resource": {"group": "", "version": "v1", "kind": "ConfigMap", "plural": "configmaps"}, "resourceVersion": "1"}
    if namespace is not None:
        d["namespace"] = namespace
    d.update(over)
    return d


class Stream:
    """Records of one case: Kafka records (one topic) or JetStream messages."""

    def __init__(self, nats=False):
        self.nats = nats
        self.lines = []
        self.ids = 0
        self.offsets = {}

    def next_id(self):
        self.ids += 1
        return f"id-{self.ids}"

    def raw(self, headers, value, partition=0, key="ns/x"):
        """One record as given: headers [(name, value)], value text or None."""
        if self.nats:
            self.lines.append({"stream": "HOSTILE", "sequence": len(self.lines) + 1, "subject": "hostile.c1._.configmap.ns.x", "headers": headers, "data": value})
        else:
            offset = self.offsets.get(partition, 0)
            self.offsets[partition] = offset + 1
            self.lines.append({"topic": "hostile.configmaps", "partition": partition, "offset": offset, "key": key, "headers": headers, "value": value})

    def headers(self, ty, id=None, subject=None, content_type="application/json", cluster=CLUSTER, **ext):
        """Binary-mode attribute headers: `ce_` (Kafka) or `ce-` (NATS)."""
        p = "ce-" if self.nats else "ce_"
        h = [[f"{p}specversion", "1.0"], [f"{p}id", id or self.next_id()], [f"{p}source", SOURCE], [f"{p}type", T + ty]]
        if subject is not None:
            h.append([f"{p}subject", subject])
        h += [[f"{p}cluster", cluster], [f"{p}apiversion", "v1"], [f"{p}kind", "ConfigMap"]]
        h += [[f"{p}{k}", v] for k, v in ext.items()]
        h.append(["ce-datacontenttype" if self.nats else "content-type", content_type])
        return h

    def event(self, ty, subject=None, data=None, value=None, **kw):
        """A binary-mode event of `ty` (without dev.deltaship.): `data` as JSON, or the
        exact `value` text."""
        self.raw(self.headers(ty, subject=subject, **{k: v for k, v in kw.items() if k != "partition"}), value if value is not None else json.dumps(data), kw.get("partition", 0))

    def added(self, name, rv, **fields):
        self.event("object.added", f"ns/{name}", cm(name, rv, **fields))

    def patch(self, name, ops, **kw):
        self.event("object.updated", f"ns/{name}", ops, content_type=PATCH, **kw)

    def marker(self, phase, data, value=None, **kw):
        self.event(f"sync.{phase}", None, data, value=value, **kw)

    def structured(self, event, value=None):
        """A structured-mode event: `event` as JSON, or the exact `value` text."""
        self.raw([["content-type", STRUCTURED]], value if value is not None else json.dumps(event))


def structured_event(s, ty, subject="ns/b", data=None, **attrs):
    e = {"specversion": "1.0", "id": s.next_id(), "source": SOURCE, "type": T + ty, "subject": subject, "cluster": CLUSTER, "apiversion": "v1", "kind": "ConfigMap", "datacontenttype": "application/json"}
    if data is not None:
        e["data"] = data
    e.update(attrs)
    return e


def nested(levels, leaf=1):
    """`levels` nested arrays around `leaf`: depth `levels`."""
    return "[" * levels + json.dumps(leaf) + "]" * levels


CASES = []


def case(name, what, nats=False):
    def register(build):
        CASES.append((name, what, nats, build))
        return build

    return register


A = cm("a", 1, data={"v": "1"})


@case("foreign-types", "events of types that are not the contract's, `dev.deltaship.` prefix or not, are ignored, never stored")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.event("object.exploded", "ns/b", cm("b", 2))
    s.raw(s.headers("object.added", subject="ns/c")[:3] + [["ce_type", "com.example.object.added"], ["ce_subject", "ns/c"], ["ce_apiversion", "v1"], ["ce_kind", "ConfigMap"]], json.dumps(cm("c", 3)))
    s.event("objects.added", "ns/d", cm("d", 4))
    # A fenced leader's fence record (JetStream): not an event of objects.
    s.event("leader.elected", data={"lease": {"namespace": "ops", "name": "deltaship"}, "holder": "pod-a"})
    return {"ns/a": A}, {}


@case("foreign-type-not-json", "an event of a foreign type is ignored before its value is read: a value that is not JSON is no error")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.event("object.added.v2", "ns/b", value="\u00ff not json {")
    s.raw([["ce_id", "x"], ["ce_type", "org.other.event"]], "<xml/>")
    return {"ns/a": A}, {}


@case("empty-value", "an empty value is skipped (`empty`), never stored as null; the object it would have replaced stays")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.event("object.added", "ns/b", value="")
    s.event("object.updated", "ns/a", value="")
    return {"ns/a": A}, {"empty": 2}


@case("null-data", "an object event whose data is null (structured `\"data\": null`, binary value `null`) or absent is skipped")
def _(s):
    s.added("a", 1, data={"v": "1"})
    e = structured_event(s, "object.added")
    e["data"] = None
    s.structured(e)
    s.structured(structured_event(s, "object.added", subject="ns/c"))
    s.event("object.updated", "ns/a", value="null")
    return {"ns/a": A}, {"missing_attribute": 3}


@case("data-not-an-object", "object data that is an array, a string, a number or a boolean is skipped (`wrong_type`)")
def _(s):
    s.added("a", 1, data={"v": "1"})
    for value in ["[1, 2]", '"text"', "42", "true"]:
        s.event("object.updated", "ns/a", value=value)
    return {"ns/a": A}, {"wrong_type": 4}


@case("not-json", "values that are not JSON (garbage, trailing text, a BOM, single quotes, a control character in a string) are skipped (`not_json`)")
def _(s):
    s.added("a", 1, data={"v": "1"})
    for value in ["\u00ff\u0000garbage", '{"a": 1} trailing', "\ufeff{}", "{'a': 1}", '{"v": "tab\there"}', '{"a": 01}', '{"a": .5}', '{"a": 1,}']:
        s.event("object.updated", "ns/a", value=value)
    return {"ns/a": A}, {"not_json": 8}


@case("truncated-json", "JSON that ends early is skipped (`truncated`); the other records are applied and the state is printed")
def _(s):
    s.added("a", 1, data={"v": "1"})
    full = json.dumps(cm("b", 2, data={"v": "2"}))
    for cut in [len(full) // 2, len(full) - 1, 1]:
        s.event("object.added", "ns/b", value=full[:cut])
    s.event("object.added", "ns/c", value='{"metadata": {"name": "c", "x": tru')
    s.event("object.added", "ns/d", value='{"v": "unterminated')
    s.added("e", 5)
    return {"ns/a": A, "ns/e": cm("e", 5)}, {"truncated": 5}


@case("nesting-limit", "a value nested 127 levels is applied, one nested 128 levels is skipped (`too_deep`), as is one nested 100,000 levels, closed or not")
def _(s):
    # The data object is level 1: 126 arrays inside it make 127.
    s.event("object.added", "ns/a", value='{"deep": ' + nested(126) + "}")
    s.event("object.added", "ns/b", value='{"deep": ' + nested(127) + "}")
    s.event("object.added", "ns/c", value='{"deep": ' + nested(100_000) + "}")
    s.event("object.added", "ns/d", value='{"deep": ' + "[" * 300)
    # Applies only to the 127 levels of ns/a stored (JSON tools nest states no deeper than 128).
    s.patch("a", [{"op": "replace", "path": "/deep", "value": "flat"}])
    return {"ns/a": {"deep": "flat"}}, {"too_deep": 3}


@case("non-finite-numbers", "`NaN`, `Infinity` and `-Infinity` are not JSON: skipped, never stored or printed")
def _(s):
    s.added("a", 1, data={"v": "1"})
    for n in ["NaN", "Infinity", "-Infinity"]:
        s.event("object.updated", "ns/a", value='{"spec": {"n": ' + n + "}}")
    return {"ns/a": A}, {"not_json": 3}


@case("numbers-out-of-range", "a number beyond a 64-bit float's range (`1e400`, 400 digits) is skipped (`not_json`), never stored as infinity")
def _(s):
    s.added("a", 1, data={"v": "1"})
    for n in ["1e400", "-1e400", "1" + "0" * 400]:
        s.event("object.updated", "ns/a", value='{"spec": {"n": ' + n + "}}")
    return {"ns/a": A}, {"not_json": 3}


@case("numbers", "integers within 64 bits are kept exact; others are 64-bit floats; a float too small is 0")
def _(s):
    s.event("object.added", "ns/a", value='{"spec": {"max": 18446744073709551615, "min": -9223372036854775808, "beyond": 18446744073709551616, "tenth": 0.1, "big": 1e300, "tiny": 1e-400, "e": 2E+3}}')
    return {"ns/a": {"spec": {"max": 18446744073709551615, "min": -9223372036854775808, "beyond": 1.8446744073709552e19, "tenth": 0.1, "big": 1e300, "tiny": 0.0, "e": 2000.0}}}, {}


@case("unicode-escapes", "a lone surrogate escape is not JSON (skipped); a surrogate pair and other escapes are kept")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.event("object.updated", "ns/a", value='{"v": "\\ud800"}')
    s.event("object.updated", "ns/a", value='{"v": "\\udc00x"}')
    s.event("object.updated", "ns/a", value='{"v": "\\ud800\\u0041"}')
    s.event("object.added", "ns/b", value='{"v": "\\ud83d\\ude00 \\u00e9 \\/ \\n"}')
    return {"ns/a": A, "ns/b": {"v": "\U0001F600 \u00e9 / \n"}}, {"not_json": 3}


@case("duplicate-json-keys", "a repeated member name in an object: the last one counts")
def _(s):
    s.event("object.added", "ns/a", value='{"data": {"v": "1", "v": "2"}, "data": {"v": "3", "w": "4", "v": "5"}}')
    return {"ns/a": {"data": {"v": "5", "w": "4"}}}, {}


def full_sync_of_a(s, **marker):
    """ns/a and ns/b, then a full sync (its markers' data changed by `marker`) of ns/a only."""
    s.added("a", 1, data={"v": "1"})
    s.added("b", 2)
    s.marker("started", marker_data("s1", **marker))
    s.event("object.synced", "ns/a", A)
    s.marker("completed", marker_data("s1", **marker))


@case("marker-resource-not-an-object", "markers whose `resource` is a string are skipped (`missing_attribute`): no sync opens, so nothing is removed")
def _(s):
    full_sync_of_a(s, resource="configmaps")
    return {"ns/a": A, "ns/b": cm("b", 2)}, {"missing_attribute": 2}


@case("marker-sync-id-not-a-string", "markers whose `syncId` is a list, a number or absent are skipped; nothing is removed")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.added("b", 2)
    s.marker("started", marker_data(["s1"]))
    s.marker("completed", marker_data(["s1"]))
    s.marker("started", marker_data(7))
    d = marker_data("x")
    del d["syncId"]
    s.marker("completed", d)
    return {"ns/a": A, "ns/b": cm("b", 2)}, {"wrong_type": 3, "missing_attribute": 1}


@case("marker-fields", "marker data that is null, an array, or has a `resource.kind` or `mode` of the wrong type is skipped; a `mode` other than `full` removes nothing")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.added("b", 2)
    s.marker("started", None, value="null")
    s.marker("started", None, value='["s1"]')
    s.marker("started", marker_data("s2", resource={"group": "", "version": "v1", "kind": ["ConfigMap"]}))
    s.marker("started", marker_data("s3", mode=1))
    s.marker("started", marker_data("s4", mode="FULL"))
    s.marker("completed", marker_data("s4", mode="FULL"))
    return {"ns/a": A, "ns/b": cm("b", 2)}, {"missing_attribute": 2, "wrong_type": 2}


@case("marker-empty-namespace", "a full sync whose `namespace` is \"\" covers no object key (keys of all namespaces need the member absent): nothing is removed")
def _(s):
    full_sync_of_a(s, namespace="")
    return {"ns/a": A, "ns/b": cm("b", 2)}, {}


@case("marker-full-sync", "a well-formed full sync among the hostile ones still removes what it did not touch, on its own partition only")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.added("b", 2)
    s.event("object.added", "ns/c", cm("c", 3), partition=1)
    s.marker("started", marker_data("s1"))
    s.marker("started", marker_data("s1"), partition=1)
    s.event("object.synced", "ns/a", A)
    s.marker("completed", marker_data("s1"))
    return {"ns/a": A, "ns/c": cm("c", 3)}, {}


@case("missing-attributes", "object events without (or with an empty) type, id, subject, apiversion or kind are skipped (`missing_attribute`), never stored under an empty key")
def _(s):
    s.added("a", 1, data={"v": "1"})
    full = s.headers("object.added", subject="ns/b")
    for drop in ["ce_type", "ce_id", "ce_subject", "ce_apiversion", "ce_kind"]:
        s.raw([h for h in full if h[0] != drop], json.dumps(cm("b", 2)))
    for empty in ["ce_type", "ce_id", "ce_subject", "ce_apiversion", "ce_kind"]:
        s.raw([[h[0], "" if h[0] == empty else h[1]] for h in full], json.dumps(cm("b", 2)))
    return {"ns/a": A}, {"missing_attribute": 10}


@case("structured-attribute-types", "a structured event whose attributes are not strings is skipped (`wrong_type`); a null attribute is an absent one")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.structured(structured_event(s, "object.added", data=cm("b", 2), subject=5))
    s.structured(structured_event(s, "object.added", data=cm("b", 2), id=True))
    s.structured(structured_event(s, "object.added", data=cm("b", 2), cluster={"name": "c1"}))
    s.structured(structured_event(s, "object.added", data=cm("b", 2), kind=None))
    s.structured(structured_event(s, "object.added", subject="ns/c", data=cm("c", 3)))
    return {"ns/a": A, "ns/c": cm("c", 3)}, {"wrong_type": 3, "missing_attribute": 1}


@case("structured-not-an-object", "a structured value that is not a JSON object, or not JSON, is skipped")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.structured(None, value="[1, 2]")
    s.structured(None, value='"event"')
    s.structured(None, value='{"id": "x", "type": ')
    return {"ns/a": A}, {"wrong_type": 2, "truncated": 1}


@case("structured-data-base64", "a structured event with `data_base64` and no `data` has no data for the protocol: skipped (`missing_attribute`)")
def _(s):
    s.added("a", 1, data={"v": "1"})
    e = structured_event(s, "object.added", subject="ns/b")
    e["data_base64"] = "eyJ2IjogIjEifQ=="
    s.structured(e)
    return {"ns/a": A}, {"missing_attribute": 1}


@case("header-case", "header names are compared without case: `CE_ID`, `Ce_Type`, `Content-Type` are the attributes")
def _(s):
    s.raw([["CE_SPECVERSION", "1.0"], ["Ce_Id", "h1"], ["CE_TYPE", T + "object.added"], ["ce_Subject", "ns/a"], ["CE_CLUSTER", CLUSTER], ["Ce_ApiVersion", "v1"], ["CE_KIND", "ConfigMap"], ["Content-Type", "application/json"]], json.dumps(A))
    s.raw([["ce_id", "h2"], ["ce_type", T + "object.updated"], ["ce_subject", "ns/a"], ["ce_cluster", CLUSTER], ["ce_apiversion", "v1"], ["ce_kind", "ConfigMap"], ["CONTENT-TYPE", PATCH]], json.dumps([{"op": "add", "path": "/data/w", "value": "2"}]))
    return {"ns/a": cm("a", 1, data={"v": "1", "w": "2"})}, {}


@case("nats-header-case", "NATS header names are compared without case too", nats=True)
def _(s):
    s.raw([["CE-ID", "h1"], ["Ce-Type", T + "object.added"], ["CE-SUBJECT", "ns/a"], ["ce-Cluster", CLUSTER], ["CE-APIVERSION", "v1"], ["Ce-Kind", "ConfigMap"], ["CE-DATACONTENTTYPE", "application/json"]], json.dumps(A))
    return {"ns/a": A}, {}


@case("repeated-headers", "of repeated headers the last one counts (subject, type, cluster)")
def _(s):
    s.raw([["ce_id", "r1"], ["ce_type", T + "object.deleted"], ["ce_type", T + "object.added"], ["ce_subject", "ns/first"], ["ce_subject", "ns/a"], ["ce_cluster", "c2"], ["ce_cluster", CLUSTER], ["ce_apiversion", "v1"], ["ce_kind", "ConfigMap"]], json.dumps(A))
    return {"ns/a": A}, {}


@case("kafka-headers-raw", "Kafka header values are raw UTF-8: `%20` and `+` in a subject are kept as they are")
def _(s):
    s.event("object.added", "ns/a%20b+c", A)
    return {"ns/a%20b+c": A}, {}


@case("nats-percent-encoding", "NATS header values are percent-decoded: `%XX` is a byte, `+` stays `+`, a `%` not followed by two hex digits is kept", nats=True)
def _(s):
    s.event("object.added", "ns/caf%C3%A9%20x", A)
    s.event("object.added", "ns/100%zz+1", A)
    s.event("object.added", "ns/tail%2", A)
    s.event("object.added", "ns/%2f%2F", A)
    return {"ns/caf\u00e9 x": A, "ns/100%zz+1": A, "ns/tail%2": A, "ns///": A}, {}


@case("nats-percent-not-utf8", "a NATS header that decodes to bytes that are not UTF-8 is skipped (`wrong_type`)", nats=True)
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.event("object.added", "ns/%FF", A)
    s.event("object.added", "ns/%E2%82", A)
    return {"ns/a": A}, {"wrong_type": 2}


@case("unused-attributes", "attributes the protocol does not use are not checked: no specversion, no source, a time that is not a time, a source that is not a URI", nats=True)
def _(s):
    h = [h for h in s.headers("object.added", subject="ns/a") if h[0] not in ("ce-specversion", "ce-source")]
    s.raw(h + [["ce-time", "yesterday"]], json.dumps(A))
    s.raw([[k, "::not a uri" if k == "ce-source" else v] for k, v in s.headers("object.added", subject="ns/b")], json.dumps(cm("b", 2)))
    return {"ns/a": A, "ns/b": cm("b", 2)}, {}


@case("tombstones", "Kafka records with a null value are ignored, wherever they are")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.raw([], None)
    s.raw(s.headers("object.deleted", subject="ns/a"), None)
    return {"ns/a": A}, {}


@case("deleted-with-bad-value", "a `deleted` whose value is not JSON, or empty, is skipped: the object stays")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.added("b", 2)
    s.event("object.deleted", "ns/a", value="{not json")
    s.event("object.deleted", "ns/b", value="")
    return {"ns/a": A, "ns/b": cm("b", 2)}, {"not_json": 1, "empty": 1}


@case("duplicates-of-bad-records", "a record skipped as bad never marks its id seen (its redelivery is skipped again); a patch that did not apply did (its repeat is a duplicate)")
def _(s):
    s.added("a", 1, data={"v": "1"})
    for _ in range(2):
        s.event("object.updated", "ns/a", value="{bad", id="same-bad")
    for _ in range(2):
        s.patch("a", [{"op": "remove", "path": "/nothing"}], id="same-patch")
    s.event("object.updated", "ns/a", cm("a", 3), id="same-patch")
    return {"ns/a": A}, {"not_json": 2, "patch_not_applied": 1}


@case("patch-copy-doubling", "a patch of 41 `copy` operations of an array into itself is refused at 2,000,000 values, fast; the object stays as it was and later patches to it are refused until a whole object comes")
def _(s):
    s.added("a", 1, spec={"list": [0, 1]})
    s.patch("a", [{"op": "copy", "from": "/spec/list", "path": "/spec/list/-"} for _ in range(41)])
    s.patch("a", [{"op": "add", "path": "/spec/x", "value": 1}])
    s.event("object.updated", "ns/a", cm("a", 3, spec={"list": []}))
    s.patch("a", [{"op": "add", "path": "/spec/list/-", "value": 7}])
    return {"ns/a": cm("a", 3, spec={"list": [7]})}, {"patch_not_applied": 2}


@case("patch-copy-root", "`copy` of the whole object into itself doubles it: refused at 2,000,000 values")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.patch("a", [{"op": "copy", "from": "", "path": f"/c{i}"} for i in range(60)])
    return {"ns/a": A}, {"patch_not_applied": 1}


@case("patch-nesting-limit", "a patch that would nest the object deeper than 127 levels is refused (the operation's path counts); up to 127 it applies")
def _(s):
    s.event("object.added", "ns/a", {"spec": {}})
    s.event("object.added", "ns/b", {"spec": {}})
    deep = 1
    for _ in range(125):
        deep = [deep]
    # spec is level 2 of the object: 125 arrays in /spec/x make 127.
    s.patch("a", [{"op": "add", "path": "/spec/x", "value": deep}])
    # The innermost array of x is at /spec/x/0/.../0 (124 indexes): one more level there is 128.
    s.patch("b", [{"op": "add", "path": "/spec/x", "value": deep}, {"op": "add", "path": "/spec/x" + "/0" * 124 + "/-", "value": [1]}])
    # Applies only if the first patch did (otherwise ns/a is stale).
    s.patch("a", [{"op": "replace", "path": "/spec/x", "value": "flat"}])
    return {"ns/a": {"spec": {"x": "flat"}}, "ns/b": {"spec": {}}}, {"patch_not_applied": 1}


@case("patch-stale-content", "after a patch that does not apply, later patches are not applied to the stale content, until the next whole object or a delete")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.patch("a", [{"op": "replace", "path": "/nothing/here", "value": "x"}])
    s.patch("a", [{"op": "replace", "path": "/data/v", "value": "2"}])
    s.added("b", 2, data={"v": "1"})
    s.patch("b", [{"op": "test", "path": "/data/v", "value": "0"}])
    s.event("object.deleted", "ns/b", cm("b", 2))
    s.added("b", 4, data={"v": "4"})
    s.patch("b", [{"op": "replace", "path": "/data/v", "value": "5"}])
    return {"ns/a": A, "ns/b": cm("b", 4, data={"v": "5"})}, {"patch_not_applied": 3}


@case("patch-never-received", "a patch for an object never received is skipped")
def _(s):
    s.patch("zz", [{"op": "add", "path": "/data/v", "value": "1"}])
    s.added("a", 1, data={"v": "1"})
    return {"ns/a": A}, {"patch_not_applied": 1}


@case("patch-all-or-nothing", "a patch is applied whole or not at all: a failing `test` after a `replace` leaves the object as it was")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.patch("a", [{"op": "replace", "path": "/data/v", "value": "2"}, {"op": "test", "path": "/data/v", "value": "3"}])
    s.added("b", 2, data={"v": "1", "n": 1})
    s.patch("b", [{"op": "test", "path": "/data/n", "value": 1}, {"op": "test", "path": "/data", "value": {"n": 1, "v": "1"}}, {"op": "remove", "path": "/data/n"}])
    return {"ns/a": A, "ns/b": cm("b", 2, data={"v": "1"})}, {"patch_not_applied": 1}


@case("patch-not-a-patch", "patch data that is not an RFC 6902 patch (an object, an unknown or upper-case `op`, no `value`, a pointer without `/`, a bad `~` escape) is skipped (`wrong_type`)")
def _(s):
    s.added("a", 1, data={"v": "1"})
    for ops in [
        {"op": "add", "path": "/data/w", "value": "2"},
        [{"op": "ADD", "path": "/data/w", "value": "2"}],
        [{"op": "merge", "path": "/data/w", "value": "2"}],
        [{"op": "add", "path": "/data/w"}],
        [{"op": "add", "path": "data/w", "value": "2"}],
        [{"op": "add", "path": "/data/~2", "value": "2"}],
        [{"op": "move", "path": "/data/w"}],
        [{"path": "/data/w", "value": "2"}],
    ]:
        s.patch("a", ops)
    return {"ns/a": A}, {"wrong_type": 8}


@case("patch-pointers", "array indexes: `-` appends, a negative or zero-led index or one past the end does not apply; `~1` and `~0` are `/` and `~`")
def _(s):
    s.added("a", 1, spec={"list": ["x", "y"]})
    s.patch("a", [{"op": "add", "path": "/spec/list/-1", "value": "z"}])
    s.added("b", 2, spec={"list": ["x", "y"]})
    s.patch("b", [{"op": "replace", "path": "/spec/list/01", "value": "z"}])
    s.added("c", 3, spec={"list": ["x", "y"]})
    s.patch("c", [{"op": "remove", "path": "/spec/list/2"}])
    s.added("d", 4, spec={"list": ["x", "y"]})
    s.patch("d", [{"op": "add", "path": "/spec/list/-", "value": "z"}, {"op": "add", "path": "/spec/list/0", "value": "w"}, {"op": "add", "path": "/spec/a~1b~0c", "value": 1}, {"op": "remove", "path": "/spec/list/1"}])
    listed = ["x", "y"]
    return {
        "ns/a": cm("a", 1, spec={"list": listed}),
        "ns/b": cm("b", 2, spec={"list": listed}),
        "ns/c": cm("c", 3, spec={"list": listed}),
        "ns/d": cm("d", 4, spec={"list": ["w", "y", "z"], "a/b~c": 1}),
    }, {"patch_not_applied": 3}


@case("patch-moves", "`move` into its own child does not apply; `move` and `copy` from a missing path do not apply; a move to a sibling does")
def _(s):
    s.added("a", 1, spec={"x": {"y": 1}})
    s.patch("a", [{"op": "move", "from": "/spec/x", "path": "/spec/x/z"}])
    s.added("b", 2, spec={"x": {"y": 1}})
    s.patch("b", [{"op": "move", "from": "/spec/nothing", "path": "/spec/z"}])
    s.added("c", 3, spec={"x": {"y": 1}})
    s.patch("c", [{"op": "copy", "from": "/spec/nothing", "path": "/spec/z"}])
    s.added("d", 4, spec={"x": {"y": 1}})
    s.patch("d", [{"op": "move", "from": "/spec/x", "path": "/spec/xy"}, {"op": "copy", "from": "/spec/xy/y", "path": "/spec/y"}])
    x = {"x": {"y": 1}}
    return {"ns/a": cm("a", 1, spec=x), "ns/b": cm("b", 2, spec=x), "ns/c": cm("c", 3, spec=x), "ns/d": cm("d", 4, spec={"xy": {"y": 1}, "y": 1})}, {"patch_not_applied": 3}


@case("patch-root", "a patch whose result is not a JSON object does not apply; replacing the whole object with an object does")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.patch("a", [{"op": "replace", "path": "", "value": [1]}])
    s.patch("a", [{"op": "remove", "path": ""}])
    s.added("b", 2, data={"v": "1"})
    s.patch("b", [{"op": "replace", "path": "", "value": {"replaced": True}}])
    return {"ns/a": A, "ns/b": {"replaced": True}}, {"patch_not_applied": 2}


@case("patch-content-type-parameters", "only the exact content type `application/json-patch+json` marks a patch; with parameters the data is the object, and an array is not one")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.event("object.updated", "ns/a", [{"op": "replace", "path": "/data/v", "value": "2"}], content_type=PATCH + "; charset=utf-8")
    return {"ns/a": A}, {"wrong_type": 1}


@case("clusters-and-skips", "a record of another cluster that cannot be decoded is skipped; one that decodes is filtered before the protocol, so its patch is never tried")
def _(s):
    s.added("a", 1, data={"v": "1"})
    s.patch("zz", [{"op": "add", "path": "/x", "value": 1}], cluster="c2")
    s.patch("a", {"op": "not a list"}, cluster="c2")
    s.event("object.added", "ns/b", value="[", cluster="c2")
    return {"ns/a": A}, {"wrong_type": 1, "truncated": 1}


def main():
    for old in HERE.iterdir():
        if old.is_dir():
            shutil.rmtree(old)
    for name, what, nats, build in CASES:
        s = Stream(nats)
        state, skipped = build(s)
        d = HERE / name
        d.mkdir()
        with open(d / ("nats.jsonl" if nats else "kafka.jsonl"), "w", encoding="utf-8") as f:
            for line in s.lines:
                f.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
        expected = {"clusters": {CLUSTER: {"v1/ConfigMap": state} if state else {}}, "skipped": {CLUSTER: skipped}}
        (d / "expected.json").write_text(json.dumps(expected, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(CASES)} hostile vectors")
    for name, what, _, _ in CASES:
        print(f"| `{name}` | {what} |")


if __name__ == "__main__":
    main()
