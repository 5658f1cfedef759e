package kafka

import (
	"crypto/tls"
	"fmt"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// An Option is a connection setting of Read: WithTLS, WithSASL. Without any, Read connects
// in plaintext, unauthenticated (Kafka's PLAINTEXT). With both it speaks SASL_SSL, with
// WithTLS alone SSL (mutual TLS when the tls.Config holds a client certificate), with
// WithSASL alone SASL_PLAINTEXT (a PLAIN password then crosses the network in clear).
type Option struct {
	apply func(*sarama.Config) error
}

// WithTLS connects over TLS with config: its RootCAs verify the brokers (nil: the
// system's), its Certificates hold the client certificate a broker that requires one
// verifies. The host name a broker's certificate must name is the one of its address,
// unless config sets ServerName.
func WithTLS(config *tls.Config) Option {
	return Option{func(c *sarama.Config) error {
		c.Net.TLS.Enable = true
		c.Net.TLS.Config = config
		return nil
	}}
}

// WithSASL authenticates as username with password through mechanism: "PLAIN",
// "SCRAM-SHA-256" or "SCRAM-SHA-512".
func WithSASL(mechanism, username, password string) Option {
	return Option{func(c *sarama.Config) error {
		switch mechanism {
		case sarama.SASLTypePlaintext:
		case sarama.SASLTypeSCRAMSHA256:
			c.Net.SASL.SCRAMClientGeneratorFunc = scramClient(scram.SHA256)
		case sarama.SASLTypeSCRAMSHA512:
			c.Net.SASL.SCRAMClientGeneratorFunc = scramClient(scram.SHA512)
		default:
			return fmt.Errorf("unknown SASL mechanism %q: give PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", mechanism)
		}
		if username == "" {
			return fmt.Errorf("SASL %s needs a user name", mechanism)
		}
		c.Net.SASL.Enable = true
		c.Net.SASL.Mechanism = sarama.SASLMechanism(mechanism)
		c.Net.SASL.User = username
		c.Net.SASL.Password = password
		return nil
	}}
}
