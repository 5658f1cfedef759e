"""The count-and-digest vectors (vectors/state-digest/ at the repository's root,
vectors/README.md): every marker's count and digest checked against the state held, the
clean streams verified without a mismatch, the tampered ones flagged at exactly their
expected markers; and the command's --verify exit code."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from deltaship_consumer import Consumer
from deltaship_consumer import read_records
from deltaship_consumer.protocol import term

HERE = Path(__file__).resolve().parents[1]
VECTORS = HERE.parents[1] / "vectors" / "state-digest"
CASES = sorted(d for d in VECTORS.iterdir() if (d / "expected.json").is_file())


def stream(case: Path) -> Path:
    return next(f for f in (case / "kafka.jsonl", case / "nats.jsonl") if f.is_file())


def test_there_are_clean_and_tampered_vectors():
    flagged = [d.name for d in CASES if json.loads((d / "expected.json").read_text())["verification"]["c1"]["mismatched"]]
    assert len(CASES) >= 7 and len(flagged) >= 5, (CASES, flagged)


def test_an_objects_term_is_the_first_half_of_the_sha256_of_key_uid_and_resource_version():
    # printf 'ns/a\nu1\n7' | sha256sum
    assert term("ns/a", "u1", "7") == 0x9003C859063459A282B3019B4296357B


@pytest.mark.parametrize("case", CASES, ids=[d.name for d in CASES])
def test_every_marker_is_checked_and_exactly_the_tampered_ones_flagged(case):
    expected = json.loads((case / "expected.json").read_text())
    for cluster, state in expected["clusters"].items():
        checks, report = [], io.StringIO()
        consumer = Consumer(cluster=cluster, on_check=checks.append, report=report)
        read_records(str(stream(case)), consumer, None)
        assert consumer.state == state, f"{case.name}, cluster {cluster}"
        assert consumer.skipped == expected["skipped"][cluster], f"{case.name}, cluster {cluster}"
        want = expected["verification"][cluster]
        assert (consumer.verified, consumer.mismatched) == (want["verified"], want["mismatched"]), f"{case.name}, cluster {cluster}"
        assert len(checks) == want["verified"] + want["mismatched"]
        bad = [
            {"syncId": c.sync_id, "partition": c.partition, "expected": {"count": c.expected_count, "digest": c.expected_digest}, "held": {"count": c.held_count, "digest": c.held_digest}}
            for c in checks
            if not c.ok
        ]
        assert bad == want["mismatches"], f"{case.name}, cluster {cluster}"
        assert [line.startswith("state mismatch at marker ") for line in report.getvalue().splitlines()] == [True] * len(bad), report.getvalue()


@pytest.mark.parametrize("case", CASES, ids=[d.name for d in CASES])
def test_the_command_exits_3_under_verify_when_a_marker_mismatched(case):
    expected = json.loads((case / "expected.json").read_text())
    want = expected["verification"]["c1"]
    for verify in ([], ["--verify"]):
        out = subprocess.run([sys.executable, "-m", "deltaship_consumer", "--records", str(stream(case)), "--cluster", "c1", *verify], cwd=HERE, capture_output=True, text=True, timeout=60)
        assert out.returncode == (3 if verify and want["mismatched"] else 0), out.stderr
        assert json.loads(out.stdout) == expected["clusters"]["c1"]
        assert sum(line.startswith("state mismatch at marker ") for line in out.stderr.splitlines()) == want["mismatched"], out.stderr
        summary = [json.loads(line.split(": ", 1)[1]) for line in out.stderr.splitlines() if line.startswith("verification: ")]
        assert summary == ([{"verified": want["verified"], "mismatched": want["mismatched"]}] if verify else []), out.stderr
