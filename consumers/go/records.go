package consumer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

// recorded is one line of a recorded stream (vectors/README.md): a Kafka record (it has a
// topic) or a JetStream message.
type recorded struct {
	Topic     string      `json:"topic"`
	Partition int32       `json:"partition"`
	Key       *string     `json:"key"`
	Headers   [][2]string `json:"headers"`
	Value     *string     `json:"value"`
	Data      string      `json:"data"`
}

// ReadRecords gives c every record of a recorded stream file, in the file's order.
func ReadRecords(path string, c *Consumer, skipped Skipped) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; lines.Scan(); n++ {
		if len(lines.Bytes()) == 0 {
			continue
		}
		var r recorded
		if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
			return fmt.Errorf("%s:%d: not a recorded record: %w", path, n, err)
		}
		headers := make([]Header, 0, len(r.Headers))
		for _, h := range r.Headers {
			headers = append(headers, Header{Key: h[0], Value: []byte(h[1])})
		}
		var applied error
		if r.Topic != "" {
			var key, value []byte
			if r.Key != nil {
				key = []byte(*r.Key)
			}
			if r.Value != nil {
				value = []byte(*r.Value)
			}
			applied = c.KafkaRecord(r.Partition, key, headers, value)
		} else {
			applied = c.NatsMessage(headers, []byte(r.Data))
		}
		if err := report(skipped, fmt.Sprintf("%s:%d", path, n), applied); err != nil {
			return err
		}
	}
	return lines.Err()
}
