package kafka

import (
	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// scramConversation is sarama's SCRAMClient over github.com/xdg-go/scram: sarama speaks
// the SASL exchange, the conversation computes its messages.
type scramConversation struct {
	hash         scram.HashGeneratorFcn
	conversation *scram.ClientConversation
}

// scramClient makes a fresh conversation per connection, as sarama asks.
func scramClient(hash scram.HashGeneratorFcn) func() sarama.SCRAMClient {
	return func() sarama.SCRAMClient { return &scramConversation{hash: hash} }
}

func (s *scramConversation) Begin(username, password, authzID string) error {
	client, err := s.hash.NewClient(username, password, authzID)
	if err != nil {
		return err
	}
	s.conversation = client.NewConversation()
	return nil
}

func (s *scramConversation) Step(challenge string) (string, error) {
	return s.conversation.Step(challenge)
}

func (s *scramConversation) Done() bool {
	return s.conversation.Done()
}
