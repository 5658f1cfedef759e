// Package kafka reads deltaship's Kafka topics into a consumer.Consumer with
// github.com/IBM/sarama: every committed record, partition by partition, up to the end each
// partition had when reading started.
package kafka

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/IBM/sarama"

	"deltaship.dev/consumer/v2"
)

// Read gives c every committed record of topics, partition by partition, in offset
// order, up to the end each partition had when reading started: its last stable offset (an
// open transaction holds it back). Each partition starts at c.Position (restored by
// consumer.Resume, or where a previous Read ended; the oldest offset when there is none),
// and c.Advance moves it past every record: Read again to follow.
//
// deltaship writes inside Kafka transactions when it fences a deposed leader: the records of
// an aborted transaction stay in the log, and the markers that end transactions take offsets
// but are never delivered. sarama delivers neither under ReadCommitted but does not tell
// where its fetching got to, so when no record comes for a while, the reader looks at what
// is left before the end itself (committedBefore).
//
// options set how it connects: WithTLS, WithSASL.
func Read(brokers []string, topics []string, c *consumer.Consumer, skipped consumer.Skipped, options ...Option) error {
	client, reader, err := connect(brokers, options)
	if err != nil {
		return err
	}
	defer client.Close()
	defer reader.Close()
	for _, topic := range topics {
		partitions, err := client.Partitions(topic)
		if err != nil {
			return fmt.Errorf("topic %s: %w", topic, err)
		}
		for _, p := range partitions {
			if err := readPartition(client, reader, topic, p, c, skipped); err != nil {
				return err
			}
		}
	}
	return nil
}

// connect makes a client that reads committed records only, with options, and a reader
// of partitions on it.
func connect(brokers []string, options []Option) (sarama.Client, sarama.Consumer, error) {
	config := sarama.NewConfig()
	for _, o := range options {
		if err := o.apply(config); err != nil {
			return nil, nil, err
		}
	}
	config.Consumer.Return.Errors = true
	// The isolation level takes Kafka 0.11's Fetch v4; 2.1 (Fetch v10, ListOffsets v4) is
	// sarama's default and what Kafka 4, which dropped older requests, still serves.
	config.Version = sarama.V2_1_0_0
	config.Consumer.IsolationLevel = sarama.ReadCommitted
	// The broker holds a fetch at a partition's end this long (sarama's default: 500 ms);
	// closing a partition's consumer waits for its fetch, at every partition's end.
	config.Consumer.MaxWaitTime = 100 * time.Millisecond
	client, err := sarama.NewClient(brokers, config)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot connect to Kafka at %v: %w", brokers, err)
	}
	reader, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, reader, nil
}

// headersOf is a record's headers as the consumer takes them.
func headersOf(m *sarama.ConsumerMessage) []consumer.Header {
	headers := make([]consumer.Header, 0, len(m.Headers))
	for _, h := range m.Headers {
		headers = append(headers, consumer.Header{Key: string(h.Key), Value: h.Value})
	}
	return headers
}

// kafkaTimeout bounds the wait for a record; kafkaIdle is how long no record comes before
// the reader looks whether any is left to come.
const (
	kafkaTimeout = 30 * time.Second
	kafkaIdle    = 200 * time.Millisecond
)

func readPartition(client sarama.Client, reader sarama.Consumer, topic string, p int32, c *consumer.Consumer, skipped consumer.Skipped) error {
	low, err := client.GetOffset(topic, p, sarama.OffsetOldest)
	if err != nil {
		return fmt.Errorf("no offsets for %s/%d: %w", topic, p, err)
	}
	high, err := lastStableOffset(client, topic, p)
	if err != nil {
		return fmt.Errorf("no offsets for %s/%d: %w", topic, p, err)
	}
	start, resumed := c.Position(topic, p)
	if !resumed {
		start = low
	} else if start < low {
		return fmt.Errorf("the position of %s/%d is offset %d, but the partition begins at %d: records were deleted (retention) before they were read; rebuild from a new snapshot", topic, p, start, low)
	}
	if high <= start {
		return nil
	}
	pc, err := reader.ConsumePartition(topic, p, start)
	if err != nil {
		return fmt.Errorf("reading %s/%d: %w", topic, p, err)
	}
	defer pc.Close()
	idle := time.NewTimer(kafkaIdle)
	defer idle.Stop()
	deadline := time.Now().Add(kafkaTimeout)
	for next := start; next < high; {
		select {
		case m := <-pc.Messages():
			if m.Offset >= high {
				return nil // committed after reading started
			}
			if err := c.SkipWith(fmt.Sprintf("%s/%d@%d", topic, p, m.Offset), c.KafkaRecord(p, m.Key, headersOf(m), m.Value), skipped); err != nil {
				return err
			}
			if err := c.Advance(topic, p, m.Offset+1); err != nil {
				return err
			}
			next = m.Offset + 1
			deadline = time.Now().Add(kafkaTimeout)
			idle.Reset(kafkaIdle)
		case err := <-pc.Errors():
			return fmt.Errorf("reading %s/%d: %w", topic, p, err)
		case <-idle.C:
			more, err := committedBefore(client, topic, p, next, high)
			if err != nil {
				return fmt.Errorf("reading %s/%d: %w", topic, p, err)
			}
			if !more {
				return nil // the rest are transaction markers and aborted records
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no record from %s/%d within %v", topic, p, kafkaTimeout)
			}
			idle.Reset(kafkaIdle)
		}
	}
	return nil
}

// lastStableOffset is where the committed records of topic/p end now: the offset before
// which every transaction is decided (the high watermark when none is open).
// client.GetOffset asks at the read_uncommitted level: the high watermark.
func lastStableOffset(client sarama.Client, topic string, p int32) (int64, error) {
	broker, err := client.Leader(topic, p)
	if err != nil {
		return 0, err
	}
	request := &sarama.OffsetRequest{Version: 4, IsolationLevel: sarama.ReadCommitted}
	request.AddBlock(topic, p, sarama.OffsetNewest, 1)
	response, err := broker.GetAvailableOffsets(request)
	if err != nil {
		return 0, err
	}
	block := response.GetBlock(topic, p)
	if block == nil {
		return 0, sarama.ErrIncompleteResponse
	}
	if !errors.Is(block.Err, sarama.ErrNoError) {
		return 0, block.Err
	}
	return block.Offset, nil
}

// committedBefore reports whether a record a read_committed consumer delivers lies in
// [from, to) of topic/p, reading the log as that consumer does (sarama's
// partitionConsumer.parseResponse): a batch of a transaction the broker lists as aborted
// is left out up to its producer's next control batch, and control batches (the markers)
// are never records. When it cannot tell (an older message format, a batch cut short) it
// answers true: the consumer's own fetching will deliver the record or time out.
func committedBefore(client sarama.Client, topic string, p int32, from, to int64) (bool, error) {
	broker, err := client.Leader(topic, p)
	if err != nil {
		return false, err
	}
	for from < to {
		// Version 10, as sarama's consumer sends at config.Version; no fetch session.
		request := &sarama.FetchRequest{Version: 10, MinBytes: 1, MaxBytes: sarama.MaxResponseSize, Isolation: sarama.ReadCommitted, SessionEpoch: -1}
		request.AddBlock(topic, p, from, 1<<20, -1)
		response, err := broker.Fetch(request)
		if err != nil {
			return false, err
		}
		block := response.GetBlock(topic, p)
		if block == nil {
			return false, sarama.ErrIncompleteResponse
		}
		if !errors.Is(block.Err, sarama.ErrNoError) {
			return false, block.Err
		}
		aborted := append([]*sarama.AbortedTransaction(nil), block.AbortedTransactions...)
		sort.Slice(aborted, func(i, j int) bool { return aborted[i].FirstOffset < aborted[j].FirstOffset })
		abortedProducers := map[int64]bool{}
		start := from
		for _, records := range block.RecordsSet {
			batch := records.RecordBatch
			if batch == nil {
				return true, nil
			}
			for len(aborted) > 0 && aborted[0].FirstOffset <= batch.LastOffset() {
				abortedProducers[aborted[0].ProducerID] = true
				aborted = aborted[1:]
			}
			switch {
			case batch.Control:
				delete(abortedProducers, batch.ProducerID)
			case batch.IsTransactional && abortedProducers[batch.ProducerID]:
			case batch.PartialTrailingRecord:
				return true, nil
			default:
				for _, r := range batch.Records {
					if offset := batch.FirstOffset + r.OffsetDelta; offset >= from && offset < to {
						return true, nil
					}
				}
			}
			from = max(from, batch.LastOffset()+1)
		}
		if from == start {
			return true, nil
		}
	}
	return false, nil
}
