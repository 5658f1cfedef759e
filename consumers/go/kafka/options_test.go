package kafka

import (
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// scramWith runs the SCRAM exchange of WithSASL's client for mechanism, as user with
// password, against a server that holds user's credentials for stored: the server's
// error, if any.
func scramWith(t *testing.T, mechanism string, hash scram.HashGeneratorFcn, password, stored string) error {
	config := sarama.NewConfig()
	if err := WithSASL(mechanism, "user", password).apply(config); err != nil {
		t.Fatal(err)
	}
	if config.Net.SASL.Mechanism != sarama.SASLMechanism(mechanism) || !config.Net.SASL.Enable {
		t.Fatalf("%s: SASL config %+v", mechanism, config.Net.SASL)
	}
	known, err := hash.NewClient("user", stored, "")
	if err != nil {
		t.Fatal(err)
	}
	credentials := known.GetStoredCredentials(scram.KeyFactors{Salt: "0123456789abcdef", Iters: 4096})
	server, err := hash.NewServer(func(string) (scram.StoredCredentials, error) { return credentials, nil })
	if err != nil {
		t.Fatal(err)
	}
	conversation := server.NewConversation()
	client := config.Net.SASL.SCRAMClientGeneratorFunc()
	if err := client.Begin("user", password, ""); err != nil {
		t.Fatal(err)
	}
	message, err := client.Step("")
	for err == nil && !client.Done() {
		var challenge string
		if challenge, err = conversation.Step(message); err != nil {
			return err
		}
		message, err = client.Step(challenge)
	}
	if err != nil {
		t.Fatalf("%s: the client failed: %v", mechanism, err)
	}
	if !conversation.Valid() {
		t.Fatalf("%s: the client finished but the server did not accept it", mechanism)
	}
	return nil
}

// TestWithSASLSpeaksSCRAM holds WithSASL's SCRAM client to a SCRAM server for both hashes:
// the right password authenticates, a wrong one is refused.
func TestWithSASLSpeaksSCRAM(t *testing.T) {
	for mechanism, hash := range map[string]scram.HashGeneratorFcn{"SCRAM-SHA-256": scram.SHA256, "SCRAM-SHA-512": scram.SHA512} {
		if err := scramWith(t, mechanism, hash, "pencil", "pencil"); err != nil {
			t.Errorf("%s with the right password: %v", mechanism, err)
		}
		if err := scramWith(t, mechanism, hash, "wrong", "pencil"); err == nil {
			t.Errorf("%s with a wrong password: accepted", mechanism)
		}
	}
}

// TestWithSASLRefusesWhatItCannotSpeak: an unknown mechanism names the ones there are, and
// no user name is an error before any connection.
func TestWithSASLRefusesWhatItCannotSpeak(t *testing.T) {
	for _, c := range []struct{ mechanism, user, want string }{
		{"SCRAM-SHA-1", "user", "give PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
		{"scram-sha-512", "user", "give PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
		{"PLAIN", "", "SASL PLAIN needs a user name"},
	} {
		err := WithSASL(c.mechanism, c.user, "pencil").apply(sarama.NewConfig())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("WithSASL(%q, %q): %v; want %q", c.mechanism, c.user, err, c.want)
		}
	}
}
