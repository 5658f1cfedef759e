"""The shared consumer test vectors (vectors/ at the repository's root): every recorded
stream rebuilds to its expected state, per cluster."""

import json
from pathlib import Path

import pytest

from deltaship_consumer import Consumer
from deltaship_consumer import read_records

VECTORS = Path(__file__).resolve().parents[3] / "vectors"
CASES = sorted((d, f) for d in VECTORS.iterdir() if (d / "expected.json").is_file() for f in ("kafka.jsonl", "nats.jsonl") if (d / f).is_file())


def test_there_are_vectors():
    assert len(CASES) >= 15, CASES


@pytest.mark.parametrize("vector,stream", CASES, ids=[f"{d.name}/{f}" for d, f in CASES])
def test_a_vector_rebuilds_to_its_expected_state(vector, stream):
    expected_all = json.loads((vector / "expected.json").read_text())
    expected = expected_all["clusters"]
    for cluster, state in expected.items():
        consumer = Consumer(cluster=cluster)
        read_records(str(vector / stream), consumer)
        assert consumer.state == state, f"{vector.name}/{stream}, cluster {cluster}"
        assert consumer.skipped == {}, f"{vector.name}/{stream}: a record of a real run skipped"
        assert consumer.mismatched == 0, f"{vector.name}/{stream}: a marker's count and digest did not match"
        # `verification` counts the Kafka copies (one per partition); a stream holds one of each.
        if "verification" in expected_all and stream == "kafka.jsonl":
            assert consumer.verified == expected_all["verification"][cluster]["verified"], f"{vector.name}/{stream}, cluster {cluster}"
        elif "verification" in expected_all:
            assert consumer.verified > 0, f"{vector.name}/{stream}, cluster {cluster}: no marker verified"
