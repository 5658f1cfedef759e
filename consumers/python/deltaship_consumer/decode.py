"""Kafka records and JetStream messages to CloudEvents, with the official SDK.

Kafka: the SDK's Kafka binding decodes binary mode (``ce_`` headers) and structured mode
(``application/cloudevents+json``). NATS: the SDK has no NATS binding; binary mode
(``ce-`` headers, values percent-encoded as the CloudEvents NATS binding says) is built into
the SDK's CloudEvent from the decoded headers, structured mode is read by the SDK's JSON
format.
"""

from __future__ import annotations

from typing import Iterable
from urllib.parse import unquote

from dateutil.parser import isoparse

from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.bindings.kafka import KafkaMessage, from_kafka
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

STRUCTURED = "application/cloudevents+json"
_FORMAT = JSONFormat()


class BadRecord(Exception):
    """A record that is not a CloudEvent the protocol can apply."""


def kafka_event(headers: Iterable[tuple[str, bytes | str | None]], key: bytes | str | None, value: bytes | None) -> BaseCloudEvent | None:
    """The CloudEvent of a Kafka record; None for a tombstone (a null value)."""
    if value is None:
        return None
    table = {name: (v.encode() if isinstance(v, str) else v) for name, v in headers if v is not None}
    try:
        return from_kafka(KafkaMessage(headers=table, key=key, value=value), _FORMAT, CloudEvent)
    except Exception as e:  # the SDK raises several types for a malformed event
        raise BadRecord(f"not a CloudEvent: {e}") from e


def nats_event(headers: Iterable[tuple[str, str]], data: bytes) -> BaseCloudEvent:
    """The CloudEvent of a JetStream message, binary or structured."""
    table = {name.lower(): value for name, value in headers}
    try:
        if table.get("content-type", "").startswith(STRUCTURED):
            return _FORMAT.read(CloudEvent, data)
        attributes = {name[3:]: unquote(value) for name, value in table.items() if name.startswith("ce-")}
        if "time" in attributes:
            attributes["time"] = isoparse(attributes["time"])
        content_type = attributes.get("datacontenttype")
        return CloudEvent(attributes, _FORMAT.read_data(data, content_type))
    except Exception as e:
        raise BadRecord(f"not a CloudEvent: {e}") from e
