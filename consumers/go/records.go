package consumer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

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
			if err := report(c, skipped, where, applied); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}
