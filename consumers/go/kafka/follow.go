package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"deltaship.dev/consumer/v2"
)

// A Record is one committed record of a topic partition, as Follow hands it on: give it to
// a consumer.Consumer with c.KafkaRecord(r.Partition, r.Key, r.Headers, r.Value).
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Headers   []consumer.Header
	Value     []byte
}

// FollowBatch is the most records Follow hands on at once.
const FollowBatch = 500

// Follow reads every committed record of topics, each partition from its beginning, and
// goes on reading as records come, until ctx is done (then it returns nil after the batch in
// hand). It calls apply with what has arrived, at most FollowBatch records, each partition's
// in offset order; an error from apply stops it and is returned. A topic that does not
// exist yet is waited for (Follow never creates one); the partitions are those a topic has
// when Follow starts. A failure to read ends it with the error.
//
// options set how it connects: WithTLS, WithSASL.
func Follow(ctx context.Context, brokers []string, topics []string, apply func([]Record) error, options ...Option) error {
	// Asking for a topic's partitions must not create it: the bridge makes its topics.
	noCreate := Option{func(c *sarama.Config) error { c.Metadata.AllowAutoTopicCreation = false; return nil }}
	client, reader, err := connect(brokers, append(options, noCreate))
	if err != nil {
		return err
	}
	defer client.Close()
	defer reader.Close()
	// Stopped first on the way out, so that no forward is left waiting to hand on a record.
	ctx, stop := context.WithCancel(ctx)
	var following []sarama.PartitionConsumer
	defer func() {
		stop()
		for _, pc := range following {
			_ = pc.Close()
		}
	}()
	records := make(chan Record, FollowBatch)
	failed := make(chan error, 1)
	for _, topic := range topics {
		partitions, err := waitForTopic(ctx, client, topic)
		if err != nil || partitions == nil {
			return err
		}
		for _, p := range partitions {
			pc, err := consumePartition(ctx, reader, topic, p)
			if err != nil || pc == nil {
				return err
			}
			following = append(following, pc)
			go forward(ctx, topic, pc, records, failed)
		}
	}
	for ctx.Err() == nil {
		var batch []Record
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case r := <-records:
			batch = append(batch, r)
		}
	more:
		for len(batch) < FollowBatch {
			select {
			case r := <-records:
				batch = append(batch, r)
			default:
				break more
			}
		}
		if err := apply(batch); err != nil {
			return err
		}
	}
	return nil
}

// waitForTopic is topic's partitions once the broker knows it, or nil when ctx is done first.
func waitForTopic(ctx context.Context, client sarama.Client, topic string) ([]int32, error) {
	for {
		partitions, err := client.Partitions(topic)
		if err == nil && len(partitions) > 0 {
			return partitions, nil
		}
		if err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			return nil, fmt.Errorf("topic %s: %w", topic, err)
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(time.Second):
		}
	}
}

// consumePartition reads topic/p from its beginning; a partition of a topic just made may
// have no leader yet for a moment, so it tries again for up to kafkaTimeout. nil when ctx
// is done first.
func consumePartition(ctx context.Context, reader sarama.Consumer, topic string, p int32) (sarama.PartitionConsumer, error) {
	deadline := time.Now().Add(kafkaTimeout)
	for {
		pc, err := reader.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err == nil {
			return pc, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("reading %s/%d: %w", topic, p, err)
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// forward sends pc's records on to records, and its first error to failed.
func forward(ctx context.Context, topic string, pc sarama.PartitionConsumer, records chan<- Record, failed chan<- error) {
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-pc.Errors():
			if ok {
				select {
				case failed <- fmt.Errorf("reading %s/%d: %w", topic, err.Partition, err.Err):
				default:
				}
			}
			return
		case m, ok := <-pc.Messages():
			if !ok {
				return
			}
			r := Record{Topic: topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Headers: headersOf(m), Value: m.Value}
			select {
			case records <- r:
			case <-ctx.Done():
				return
			}
		}
	}
}
