package consumer

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
)

// Header is one record or message header.
type Header struct {
	Key   string
	Value []byte
}

// KafkaRecord applies one Kafka record of partition. The official CloudEvents Go SDK
// decodes it (its Sarama binding: binary ce_ headers or structured
// application/cloudevents+json). A record with a nil value (a tombstone) is ignored.
func (c *Consumer) KafkaRecord(partition int32, key []byte, headers []Header, value []byte) error {
	if value == nil {
		return nil
	}
	record := &sarama.ConsumerMessage{Key: key, Value: value, Partition: partition}
	for _, h := range headers {
		record.Headers = append(record.Headers, &sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
	}
	e, err := binding.ToEvent(context.Background(), kafka_sarama.NewMessageFromConsumerMessage(record))
	if err != nil {
		return bad("not a CloudEvent: %v", err)
	}
	return c.Apply(e, partition)
}

// NatsMessage applies one JetStream message. Binary mode (ce- headers, values
// percent-encoded as the CloudEvents NATS binding says) is built into the SDK's event from
// the decoded headers; structured mode (application/cloudevents+json) is read by the SDK.
func (c *Consumer) NatsMessage(headers []Header, data []byte) error {
	e := event.New()
	structured := false
	for _, h := range headers {
		name := strings.ToLower(h.Key)
		if name == "content-type" && strings.HasPrefix(string(h.Value), "application/cloudevents+json") {
			structured = true
		}
	}
	if structured {
		if err := e.UnmarshalJSON(data); err != nil {
			return bad("not a CloudEvent: %v", err)
		}
		return c.Apply(&e, 0)
	}
	for _, h := range headers {
		name := strings.ToLower(h.Key)
		if !strings.HasPrefix(name, "ce-") {
			continue
		}
		value, err := url.PathUnescape(string(h.Value))
		if err != nil {
			return bad("header %s: %v", h.Key, err)
		}
		switch attr := name[3:]; attr {
		case "specversion":
			e.SetSpecVersion(value)
		case "id":
			e.SetID(value)
		case "type":
			e.SetType(value)
		case "source":
			e.SetSource(value)
		case "subject":
			e.SetSubject(value)
		case "datacontenttype":
			e.SetDataContentType(value)
		case "dataschema":
			e.SetDataSchema(value)
		case "time":
			t, err := time.Parse(time.RFC3339Nano, value)
			if err != nil {
				return bad("header %s: %v", h.Key, err)
			}
			e.SetTime(t)
		default:
			e.SetExtension(attr, value)
		}
	}
	e.DataEncoded = data
	if err := e.Validate(); err != nil {
		return bad("not a CloudEvent: %v", err)
	}
	return c.Apply(&e, 0)
}
