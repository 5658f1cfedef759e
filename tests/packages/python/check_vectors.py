"""Rebuilds every shared test vector through the installed deltaship-consumer package and
prints one JSON line: what was checked, what failed, and facts about the installation.

    python check_vectors.py VECTORS_DIR
"""

import asyncio
import importlib.metadata
import importlib.resources
import json
import sys
from pathlib import Path

import deltaship_consumer
from deltaship_consumer import CONTRACT_VERSION, Consumer, read_jetstream, read_kafka, read_records


def main(vectors: Path) -> None:
    checked, failures = 0, []
    for expected_path in sorted(vectors.glob("*/expected.json")) + sorted(vectors.glob("*/*/expected.json")):
        case = expected_path.parent
        expected = json.loads(expected_path.read_text())
        streams = [case / f for f in ("kafka.jsonl", "nats.jsonl") if (case / f).is_file()]
        for stream in streams:
            for cluster, state in expected["clusters"].items():
                c = Consumer(cluster=cluster, report=None)
                read_records(str(stream), c, report=None)
                what = f"{case.relative_to(vectors)}/{stream.name}, cluster {cluster}"
                if c.state != state:
                    failures.append(f"{what}: state")
                if c.skipped != expected.get("skipped", {}).get(cluster, {}):
                    failures.append(f"{what}: skipped {c.skipped}")
                v = expected.get("verification", {}).get(cluster)
                # The first stream's markers are the ones counted (each Kafka copy once).
                if v is not None and (c.mismatched != v["mismatched"] or (c.verified != v["verified"] if stream == streams[0] else c.verified == 0)):
                    failures.append(f"{what}: verified {c.verified}, mismatched {c.mismatched}")
                checked += 1
    # Without the extras, each reader says which one to install.
    missing = {}
    for reader, call in (
        ("read_kafka", lambda: read_kafka("127.0.0.1:1", ["t"], Consumer())),
        ("read_jetstream", lambda: asyncio.run(read_jetstream("nats://127.0.0.1:1", "s", Consumer()))),
    ):
        try:
            call()
            missing[reader] = "no error"
        except ImportError as e:
            missing[reader] = str(e)
        except Exception as e:
            missing[reader] = f"not an ImportError: {e!r}"
    meta = importlib.metadata.metadata("deltaship-consumer")
    print(json.dumps({
        "checked": checked,
        "failures": failures,
        "contract": CONTRACT_VERSION,
        "version": importlib.metadata.version("deltaship-consumer"),
        "file": deltaship_consumer.__file__,
        "typed": importlib.resources.files("deltaship_consumer").joinpath("py.typed").is_file(),
        "license": meta.get("License-Expression"),
        "requires": meta.get_all("Requires-Dist") or [],
        "extras": meta.get_all("Provides-Extra") or [],
        "missing": missing,
    }))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
