package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"strings"

	"deltaship.dev/consumer/v2/kafka"
)

// security holds the flags of the Kafka connection's TLS and SASL. The password is read
// from a file, never given on the command line, where other users of the host see it.
type security struct {
	tlsOn                             *bool
	caFile, certFile, keyFile         *string
	mechanism, username, passwordFile *string
}

func securityFlags() security {
	return security{
		tlsOn:        flag.Bool("tls", false, "connect to Kafka over TLS (on too with any -tls-* file; the system's CAs without -tls-ca-file)"),
		caFile:       flag.String("tls-ca-file", "", "PEM CA certificate(s) to verify the Kafka brokers with"),
		certFile:     flag.String("tls-cert-file", "", "PEM client certificate, with -tls-key-file, for brokers that require one (mutual TLS)"),
		keyFile:      flag.String("tls-key-file", "", "PEM private key of -tls-cert-file (unencrypted)"),
		mechanism:    flag.String("sasl-mechanism", "", "SASL mechanism to authenticate to Kafka with: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
		username:     flag.String("sasl-username", "", "the SASL user"),
		passwordFile: flag.String("sasl-password-file", "", "file holding the SASL password (a trailing newline is ignored)"),
	}
}

// options are kafka.Read's options for the flags given.
func (s security) options() ([]kafka.Option, error) {
	var options []kafka.Option
	if *s.tlsOn || *s.caFile != "" || *s.certFile != "" || *s.keyFile != "" {
		config, err := s.tlsConfig()
		if err != nil {
			return nil, err
		}
		options = append(options, kafka.WithTLS(config))
	}
	if *s.mechanism != "" || *s.username != "" || *s.passwordFile != "" {
		if *s.mechanism == "" || *s.username == "" || *s.passwordFile == "" {
			return nil, fmt.Errorf("SASL needs -sasl-mechanism, -sasl-username and -sasl-password-file together")
		}
		password, err := os.ReadFile(*s.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("-sasl-password-file: %w", err)
		}
		options = append(options, kafka.WithSASL(*s.mechanism, *s.username, strings.TrimRight(string(password), "\r\n")))
	}
	return options, nil
}

func (s security) tlsConfig() (*tls.Config, error) {
	config := &tls.Config{}
	if *s.caFile != "" {
		pem, err := os.ReadFile(*s.caFile)
		if err != nil {
			return nil, fmt.Errorf("-tls-ca-file: %w", err)
		}
		config.RootCAs = x509.NewCertPool()
		if !config.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-ca-file %s holds no PEM certificate", *s.caFile)
		}
	}
	if (*s.certFile == "") != (*s.keyFile == "") {
		return nil, fmt.Errorf("-tls-cert-file and -tls-key-file go together")
	}
	if *s.certFile != "" {
		pair, err := tls.LoadX509KeyPair(*s.certFile, *s.keyFile)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert-file %s with -tls-key-file %s: %w", *s.certFile, *s.keyFile, err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config, nil
}
