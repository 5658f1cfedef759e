package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/IBM/sarama"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Skipped is told of every bad record a reader skips (after it is counted in
// Consumer.Skipped); nil: Consumer.Skip reports it.
type Skipped func(where string, err error)

// report skips a bad record (counted, then told to skipped or reported); other errors
// are returned.
func report(c *Consumer, skipped Skipped, where string, err error) error {
	var bad *BadRecord
	if err == nil || !errors.As(err, &bad) || skipped == nil {
		if err == nil {
			return nil
		}
		return c.Skip(where, err)
	}
	c.Skipped[bad.Reason]++
	skipped(where, err)
	return nil
}

// ReadKafka gives c every record of topics, partition by partition, in offset order, up
// to the end each partition had when reading started.
func ReadKafka(brokers []string, topics []string, c *Consumer, skipped Skipped) error {
	config := sarama.NewConfig()
	config.Consumer.Return.Errors = true
	client, err := sarama.NewClient(brokers, config)
	if err != nil {
		return fmt.Errorf("cannot connect to Kafka at %v: %w", brokers, err)
	}
	defer client.Close()
	reader, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return err
	}
	defer reader.Close()
	for _, topic := range topics {
		partitions, err := client.Partitions(topic)
		if err != nil {
			return fmt.Errorf("topic %s: %w", topic, err)
		}
		for _, p := range partitions {
			high, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				return fmt.Errorf("no offsets for %s/%d: %w", topic, p, err)
			}
			low, err := client.GetOffset(topic, p, sarama.OffsetOldest)
			if err != nil {
				return fmt.Errorf("no offsets for %s/%d: %w", topic, p, err)
			}
			if high <= low {
				continue
			}
			pc, err := reader.ConsumePartition(topic, p, sarama.OffsetOldest)
			if err != nil {
				return fmt.Errorf("reading %s/%d: %w", topic, p, err)
			}
			for done := false; !done; {
				select {
				case m := <-pc.Messages():
					headers := make([]Header, 0, len(m.Headers))
					for _, h := range m.Headers {
						headers = append(headers, Header{Key: string(h.Key), Value: h.Value})
					}
					if err := report(c, skipped, fmt.Sprintf("%s/%d@%d", topic, p, m.Offset), c.KafkaRecord(p, m.Key, headers, m.Value)); err != nil {
						pc.Close()
						return err
					}
					done = m.Offset+1 >= high
				case err := <-pc.Errors():
					pc.Close()
					return fmt.Errorf("reading %s/%d: %w", topic, p, err)
				case <-time.After(30 * time.Second):
					pc.Close()
					return fmt.Errorf("no record from %s/%d within 30 s", topic, p)
				}
			}
			pc.Close()
		}
	}
	return nil
}

// ReadJetStream gives c every message of stream, in stream order, up to the last message
// it had when reading started.
func ReadJetStream(ctx context.Context, url, stream string, c *Consumer, skipped Skipped) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("cannot connect to %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	last := info.State.LastSeq
	if last == 0 {
		return nil
	}
	reader, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	for seq := uint64(0); seq < last; {
		batch, err := reader.Fetch(500, jetstream.FetchMaxWait(30*time.Second))
		if err != nil {
			return err
		}
		got := 0
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			seq = meta.Sequence.Stream
			got++
			var headers []Header
			for name, values := range m.Headers() {
				for _, v := range values {
					headers = append(headers, Header{Key: name, Value: []byte(v)})
				}
			}
			if err := report(c, skipped, fmt.Sprintf("%s#%d", stream, seq), c.NatsMessage(headers, m.Data())); err != nil {
				return err
			}
			if seq >= last {
				break
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if got == 0 {
			return fmt.Errorf("no message after %s#%d within 30 s", stream, seq)
		}
	}
	return nil
}
