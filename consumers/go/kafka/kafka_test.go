package kafka

import (
	"testing"

	"github.com/IBM/sarama"
)

// TestCommittedBeforeSeesOnlyRecordsAReadCommittedConsumerDelivers holds the end-of-partition
// check to a log of transactions: a commit marker and an aborted transaction (its record and
// marker) are nothing to wait for; a committed record, and one of a producer that committed
// after it aborted, are.
func TestCommittedBeforeSeesOnlyRecordsAReadCommittedConsumerDelivers(t *testing.T) {
	broker := sarama.NewMockBroker(t, 1)
	defer broker.Close()
	log := &sarama.FetchResponse{Version: 10}
	log.AddRecordBatch("t", 0, nil, sarama.StringEncoder("committed"), 0, 1, true)
	log.AddControlRecord("t", 0, 1, 1, sarama.ControlRecordCommit)
	log.AddRecordBatch("t", 0, nil, sarama.StringEncoder("aborted"), 2, 2, true)
	log.AddControlRecord("t", 0, 3, 2, sarama.ControlRecordAbort)
	log.AddRecordBatch("t", 0, nil, sarama.StringEncoder("committed after an abort"), 4, 2, true)
	log.AddControlRecord("t", 0, 5, 2, sarama.ControlRecordCommit)
	log.GetBlock("t", 0).AbortedTransactions = []*sarama.AbortedTransaction{{ProducerID: 2, FirstOffset: 2}}
	broker.SetHandlerByMap(map[string]sarama.MockResponse{
		"MetadataRequest": sarama.NewMockMetadataResponse(t).SetBroker(broker.Addr(), broker.BrokerID()).SetLeader("t", 0, broker.BrokerID()),
		"FetchRequest":    sarama.NewMockWrapper(log),
	})
	config := sarama.NewConfig()
	config.Version = sarama.V2_1_0_0
	client, err := sarama.NewClient([]string{broker.Addr()}, config)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for _, c := range []struct {
		from, to int64
		want     bool
	}{{0, 6, true}, {1, 4, false}, {1, 6, true}, {2, 4, false}, {5, 6, false}, {3, 5, true}} {
		got, err := committedBefore(client, "t", 0, c.from, c.to)
		if err != nil || got != c.want {
			t.Errorf("committedBefore(%d, %d) = %v, %v; want %v", c.from, c.to, got, err, c.want)
		}
	}
}
