"""Recorded streams (the test vectors' format, vectors/README.md in the repository): Kafka
records or JetStream messages as JSON lines, given to a ``Consumer`` in the file's order."""

from __future__ import annotations

import json
import sys
from typing import TextIO

from .decode import BadRecord
from .protocol import Consumer


def read_records(path: str, consumer: Consumer, report: TextIO | None = sys.stderr) -> None:
    """A recorded stream: Kafka records or JetStream messages as JSON lines. Bad records
    are skipped, counted in ``consumer.skipped`` and reported to ``report``; a line that
    is not a recorded record is an error (ValueError) of the file."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                headers = [(k.encode(), v.encode()) for k, v in r["headers"]]
                if "topic" in r:
                    where = f"{r['topic']}/{r['partition']}@{r['offset']}"
                    value = None if r["value"] is None else r["value"].encode()
                    step = lambda: consumer.kafka_record(r["partition"], r.get("key"), headers, value)  # noqa: E731
                else:
                    where = f"{r['stream']}#{r['sequence']}"
                    data = r["data"].encode()
                    step = lambda: consumer.nats_message(headers, data)  # noqa: E731
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise ValueError(f"{path}:{n}: not a recorded Kafka record or JetStream message: {e!r}") from None
            try:
                step()
            except BadRecord as e:
                consumer.skip(where, e, report)
