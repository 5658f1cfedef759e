"""Repeats are skipped in memory that does not grow with the stream: the latest ids in a
bounded window, and the last id of each object and marker scope held."""

import tracemalloc

from deltaship_consumer import DEFAULT_REPEAT_WINDOW, Consumer
from deltaship_consumer.repeats import Window


def test_the_window_remembers_the_latest_ids_in_bounded_memory():
    tracemalloc.start()
    try:
        w = Window()
        n = 3 * DEFAULT_REPEAT_WINDOW
        for i in range(n):
            w.add((0, f"{i:032x}"))
        grown, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert all((0, f"{i:032x}") in w for i in range(n - DEFAULT_REPEAT_WINDOW, n)), "one of the latest ids forgotten"
    assert (0, f"{0:032x}") not in w and (1, f"{n - 1:032x}") not in w
    assert len(w) <= 2 * DEFAULT_REPEAT_WINDOW
    # Measured: 34 MiB for 200,000 ids (two full generations).
    assert grown < 64 << 20, f"{grown} bytes for {len(w)} ids"


def update(id, key, v):
    headers = [
        ("ce_id", id),
        ("ce_type", "dev.deltaship.object.updated"),
        ("ce_subject", f"ns/{key}"),
        ("ce_apiversion", "v1"),
        ("ce_kind", "ConfigMap"),
        ("ce_cluster", "c1"),
        ("content-type", "application/json"),
    ]
    return headers, f'{{"metadata":{{"name":"{key}","namespace":"ns"}},"data":{{"v":"{v}"}}}}'.encode()


def test_updates_of_a_few_keys_keep_memory_flat_and_late_repeats_of_held_objects_skipped():
    c = Consumer(cluster="c1", repeat_window=500)
    quiet = update("quiet-1", "quiet", 1)
    c.kafka_record(0, None, *quiet)
    tracemalloc.start()
    try:
        sizes = []
        for i in range(6_000):
            c.kafka_record(0, None, *update(str(i), f"k{i % 4}", i))
            if i % 2_000 == 1_999:
                sizes.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    assert len(c._window) <= 1_000
    # Flat: the last 4,000 updates (four windows) added nothing to what the first 2,000 left.
    assert sizes[2] <= sizes[0] + (64 << 10), sizes
    c.kafka_record(0, None, *quiet)
    assert c.duplicates == 1, "a repeat of quiet's last event, 6,000 events later"
    assert sorted(c.state["v1/ConfigMap"]) == ["ns/k0", "ns/k1", "ns/k2", "ns/k3", "ns/quiet"]


def test_a_repeat_of_a_marker_is_skipped_as_long_as_it_is_its_scopes_last():
    c = Consumer(cluster="c1", repeat_window=1)
    marker = [
        ("ce_id", "m1"),
        ("ce_type", "dev.deltaship.sync.started"),
        ("ce_apiversion", "v1"),
        ("ce_kind", "ConfigMap"),
        ("ce_cluster", "c1"),
        ("content-type", "application/json"),
    ]
    data = b'{"syncId": "s1", "mode": "full", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}'
    c.kafka_record(0, None, marker, data)
    c.kafka_record(0, None, *update("a1", "a", 1))
    c.kafka_record(0, None, marker, data)
    assert c.duplicates == 1
    # The same marker id on another partition is that partition's copy, not a repeat.
    c.kafka_record(1, None, marker, data)
    assert c.duplicates == 1
