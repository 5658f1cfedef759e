// Package jetstream reads a deltaship JetStream stream into a consumer.Consumer with
// github.com/nats-io/nats.go: every message, in stream order, up to the last message the
// stream had when reading started.
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"deltaship.dev/consumer/v2"
)

// Read gives c every message of stream, in stream order, up to the last message it had
// when reading started. It starts at c.Position(stream, 0) (restored by consumer.Resume, or
// where a previous Read ended; the first message when there is none), and c.Advance moves
// it past every message: Read again to follow.
func Read(ctx context.Context, url, stream string, c *consumer.Consumer, skipped consumer.Skipped) error {
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
	from := jetstream.OrderedConsumerConfig{}
	seq := uint64(0)
	if start, resumed := c.Position(stream, 0); resumed {
		if uint64(start) < info.State.FirstSeq {
			return fmt.Errorf("the position of stream %s is sequence %d, but the stream begins at %d: messages were deleted (limits) before they were read; rebuild from a new snapshot", stream, start, info.State.FirstSeq)
		}
		from = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: uint64(start)}
		seq = uint64(start) - 1
	}
	if last == 0 || seq >= last {
		return nil
	}
	reader, err := s.OrderedConsumer(ctx, from)
	if err != nil {
		return err
	}
	for seq < last {
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
			var headers []consumer.Header
			for name, values := range m.Headers() {
				for _, v := range values {
					headers = append(headers, consumer.Header{Key: name, Value: []byte(v)})
				}
			}
			if err := c.SkipWith(fmt.Sprintf("%s#%d", stream, seq), c.NatsMessage(headers, m.Data()), skipped); err != nil {
				return err
			}
			if err := c.Advance(stream, 0, int64(seq)+1); err != nil {
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
