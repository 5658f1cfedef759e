"""The hostile vectors (vectors/hostile/ at the repository's root, vectors/README.md): records
no bridge ships, each stream rebuilt to its expected state with its expected records
skipped; and records at and above the record size bound."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deltaship_consumer import MAX_RECORD_BYTES, Consumer
from deltaship_consumer import read_records

HERE = Path(__file__).resolve().parents[1]
HOSTILE = HERE.parents[1] / "vectors" / "hostile"
CASES = sorted(d for d in HOSTILE.iterdir() if (d / "expected.json").is_file())


def stream(case: Path) -> Path:
    return next(f for f in (case / "kafka.jsonl", case / "nats.jsonl") if f.is_file())


def test_there_are_at_least_30_hostile_vectors():
    assert len(CASES) >= 30, CASES


@pytest.mark.parametrize("case", CASES, ids=[d.name for d in CASES])
def test_a_hostile_vector_rebuilds_to_its_state_skipping_what_it_expects(case):
    expected = json.loads((case / "expected.json").read_text())
    for cluster, state in expected["clusters"].items():
        consumer = Consumer(cluster=cluster)
        started = time.monotonic()
        read_records(str(stream(case)), consumer, None)
        assert consumer.state == state, f"{case.name}, cluster {cluster}"
        assert consumer.skipped == expected["skipped"][cluster], f"{case.name}, cluster {cluster}"
        assert time.monotonic() - started < 30, f"{case.name} took {time.monotonic() - started:.1f} s"


@pytest.mark.parametrize("case", CASES, ids=[d.name for d in CASES])
def test_the_command_prints_valid_json_state_and_reports_each_skipped_record(case):
    expected = json.loads((case / "expected.json").read_text())
    (cluster, state), = expected["clusters"].items()
    out = subprocess.run([sys.executable, "-m", "deltaship_consumer", "--records", str(stream(case)), "--cluster", cluster], cwd=HERE, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout, parse_constant=lambda c: pytest.fail(f"{c} in the printed state")) == state
    reported = [line.split(": ")[1] for line in out.stderr.splitlines() if line.startswith("skipped record ")]
    assert sorted(reported) == sorted(r for r, n in expected["skipped"][cluster].items() for _ in range(n)), out.stderr


def big_record(name: str, size: int) -> str:
    """A Kafka line of an `added` whose value is `size` bytes (vectors/README.md, "Record size")."""
    head = json.dumps({"metadata": {"name": name, "namespace": "ns"}, "data": {"big": ""}}, separators=(",", ":"))
    value = head[:-3] + "x" * (size - len(head)) + head[-3:]
    headers = [["ce_id", name], ["ce_type", "dev.deltaship.object.added"], ["ce_subject", f"ns/{name}"], ["ce_apiversion", "v1"], ["ce_kind", "ConfigMap"], ["ce_cluster", "c1"]]
    return json.dumps({"topic": "big", "partition": 0, "offset": 0, "key": None, "headers": headers, "value": value})


def test_a_record_of_the_size_bound_is_applied_and_a_larger_one_skipped(tmp_path):
    records = tmp_path / "big.jsonl"
    records.write_text(big_record("a", MAX_RECORD_BYTES) + "\n" + big_record("b", 20_000_001) + "\n" + big_record("c", 100) + "\n")
    consumer = Consumer(cluster="c1")
    read_records(str(records), consumer, None)
    objects = consumer.state["v1/ConfigMap"]
    assert sorted(objects) == ["ns/a", "ns/c"]
    assert len(json.dumps(objects["ns/a"], separators=(",", ":"))) == MAX_RECORD_BYTES
    assert consumer.skipped == {"too_large": 1}


def test_a_line_that_is_not_a_recorded_record_is_an_error_of_the_file(tmp_path):
    records = tmp_path / "bad.jsonl"
    records.write_text('{"topic": "t", "partition": 0}\n')
    out = subprocess.run([sys.executable, "-m", "deltaship_consumer", "--records", str(records)], cwd=HERE, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "bad.jsonl:1: not a recorded" in out.stderr, out.stderr
