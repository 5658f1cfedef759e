"""A consumer saved to a snapshot in the middle of a stream and resumed from it ends exactly
as one that read the stream without stopping: same state, same protocol memory, same counts."""

import json
from pathlib import Path

import pytest

from deltaship_consumer import Consumer
from deltaship_consumer.snapshot import snapshot_of

VECTORS = Path(__file__).resolve().parents[3] / "vectors"


def records(vector):
    lines = (VECTORS / vector / "kafka.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def feed(consumer, rs):
    for r in rs:
        headers = [(k, v) for k, v in r["headers"]]
        value = None if r["value"] is None else r["value"].encode()
        consumer.kafka_record(r["partition"], r.get("key"), headers, value)
        consumer.advance(r["topic"], r["partition"], r["offset"] + 1)


def normal(doc):
    """The snapshot document with its lists in one order."""
    return json.loads(json.dumps({k: sorted(v, key=json.dumps) if isinstance(v, list) else v for k, v in doc.items()}, sort_keys=True))


@pytest.mark.parametrize("vector", ["initial-and-live", "duplicates", "patch", "relist-diff", "restart", "resync"])
def test_a_consumer_resumed_from_a_snapshot_ends_as_one_that_never_stopped(vector, tmp_path):
    rs = records(vector)
    straight = Consumer(cluster="vectors", report=None)
    feed(straight, rs)
    for cut in (1, len(rs) // 3, len(rs) // 2, len(rs) - 1):
        first = Consumer(cluster="vectors", report=None, snapshot=tmp_path / "s.json")
        feed(first, rs[:cut])
        first.save()
        resumed = Consumer.resume(tmp_path / "s.json", cluster="vectors", report=None)
        assert resumed.position(rs[cut - 1]["topic"], rs[cut - 1]["partition"]) == rs[cut - 1]["offset"] + 1
        feed(resumed, rs[cut:])
        assert normal(snapshot_of(resumed)) == normal(snapshot_of(straight)), f"{vector}, cut at {cut}"


def test_a_snapshot_saves_itself_every_save_every_records_and_resumes_with_its_cluster_only(tmp_path):
    rs = records("initial-and-live")
    path = tmp_path / "s.json"
    c = Consumer(cluster="vectors", report=None, snapshot=path, save_every=2)
    feed(c, rs[:3])
    saved = json.loads(path.read_text())
    assert sum(n for parts in saved["positions"].values() for n in parts.values()) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"], "no temporary file left"
    with pytest.raises(ValueError, match="taken with cluster 'vectors'"):
        Consumer.resume(path, cluster="other")
    path.write_text("{}")
    with pytest.raises(ValueError, match="not a snapshot"):
        Consumer.resume(path, cluster="vectors")
    assert Consumer.resume(tmp_path / "none.json").state == {}
