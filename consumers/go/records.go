package consumer

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Skipped is told of every bad record a reader skips (after it is counted in
// Consumer.Skipped); nil: Consumer.Skip reports it.
type Skipped func(where string, err error)

// SkipWith settles what applying the record read at where returned: nil is nil; a
// *BadRecord is counted in c.Skipped, then told to skipped (or, when skipped is nil,
// reported as Skip does); any other error is returned. The readers call it per record.
func (c *Consumer) SkipWith(where string, err error, skipped Skipped) error {
	var bad *BadRecord
	if err == nil || skipped == nil || !errors.As(err, &bad) {
		if err == nil {
			return nil
		}
		return c.Skip(where, err)
	}
	c.Skipped[bad.Reason]++
	skipped(where, err)
	return nil
}

// recorded is one line of a recorded stream (vectors/README.md): a Kafka record (it has a
// topic) or a JetStream message.
type recorded struct {
	Topic     *string     `json:"topic"`
	Partition int32       `json:"partition"`
	Offset    int64       `json:"offset"`
	Headers   [][2]string `json:"headers"`
	Value     *string     `json:"value"`
	Stream    string      `json:"stream"`
	Sequence  uint64      `json:"sequence"`
	Data      *string     `json:"data"`
}

// ReadRecords gives c every record of a recorded stream file, in the file's order, lines
// of any length. Bad records are skipped (counted in c.Skipped, then told to skipped, or
// reported); a line that is not a recorded record is an error of the file.
func ReadRecords(path string, c *Consumer, skipped Skipped) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	lines := bufio.NewReaderSize(f, 1<<20)
	for n := 1; ; n++ {
		line, err := lines.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return err
		}
		if strings.TrimSpace(string(line)) != "" {
			var r recorded
			if jerr := json.Unmarshal(line, &r); jerr != nil || r.Headers == nil || (r.Topic == nil) == (r.Data == nil) {
				return fmt.Errorf("%s:%d: not a recorded Kafka record or JetStream message: %v", path, n, jerr)
			}
			headers := make([]Header, 0, len(r.Headers))
			for _, h := range r.Headers {
				headers = append(headers, Header{Key: h[0], Value: []byte(h[1])})
			}
			var where string
			var applied error
			if r.Topic != nil {
				var value []byte
				if r.Value != nil {
					value = []byte(*r.Value)
				}
				where = fmt.Sprintf("%s/%d@%d", *r.Topic, r.Partition, r.Offset)
				applied = c.KafkaRecord(r.Partition, nil, headers, value)
			} else {
				where = fmt.Sprintf("%s#%d", r.Stream, r.Sequence)
				applied = c.NatsMessage(headers, []byte(*r.Data))
			}
			if err := c.SkipWith(where, applied, skipped); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}
