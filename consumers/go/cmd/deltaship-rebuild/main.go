// deltaship-rebuild rebuilds state from a Kafka topic, a JetStream stream or a recorded
// stream (a test vector's kafka.jsonl or nats.jsonl) and prints it as JSON:
// {"<apiVersion>/<Kind>": {"<key>": object}}. Records that cannot be applied are skipped,
// each reported on stderr ("skipped record <where>: <reason>: <problem>"), and counted by
// reason in a last stderr line. A sync.completed marker whose count and digest do not match
// the state held is reported on stderr ("state mismatch at marker ..."); with -verify a last
// line "verification: {"verified": N, "mismatched": M}" follows and the exit code is 3 when
// M > 0. The -tls* and -sasl-* flags secure the Kafka connection; the SASL password comes
// from a file. With -snapshot FILE it resumes from the snapshot in FILE (when there is one)
// and saves it there every -save-every records and at the end.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"deltaship.dev/consumer/v2"
	"deltaship.dev/consumer/v2/jetstream"
	"deltaship.dev/consumer/v2/kafka"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var topics list
	brokers := flag.String("kafka", "", "Kafka bootstrap servers, comma separated; read every -topic")
	flag.Var(&topics, "topic", "a Kafka topic (repeat for several)")
	natsURL := flag.String("nats", "", "NATS server URL; read the -stream")
	stream := flag.String("stream", "", "the JetStream stream")
	records := flag.String("records", "", "a recorded stream (vectors/*/kafka.jsonl or nats.jsonl)")
	cluster := flag.String("cluster", "", "apply only this cluster's events")
	verify := flag.Bool("verify", false, "exit 3 when a marker's count and digest did not match the state held")
	snapshot := flag.String("snapshot", "", "resume from this snapshot file (when it exists) and save to it as records are read and at the end")
	saveEvery := flag.Int("save-every", consumer.DefaultSaveEvery, "records between two saves of -snapshot")
	security := securityFlags()
	flag.Parse()
	opts := consumer.Options{Cluster: *cluster}
	c := consumer.New(opts)
	var err error
	if *snapshot != "" {
		if *records != "" {
			fmt.Fprintln(os.Stderr, "error: -snapshot keeps positions in a topic or a stream: give it with -kafka or -nats")
			os.Exit(2)
		}
		opts.Snapshot, opts.SaveEvery = *snapshot, *saveEvery
		if c, err = consumer.Resume(opts); err != nil {
			fmt.Fprintf(os.Stderr, "error: %v\n", err)
			os.Exit(1)
		}
	}
	switch {
	case *records != "":
		err = consumer.ReadRecords(*records, c, nil)
	case *brokers != "" && len(topics) > 0:
		options, bad := security.options()
		if bad != nil {
			fmt.Fprintf(os.Stderr, "error: %v\n", bad)
			os.Exit(2)
		}
		err = kafka.Read(strings.Split(*brokers, ","), topics, c, nil, options...)
	case *natsURL != "" && *stream != "":
		err = jetstream.Read(context.Background(), *natsURL, *stream, c, nil)
	default:
		fmt.Fprintln(os.Stderr, "error: give -records FILE, -kafka BROKERS with -topic, or -nats URL with -stream")
		os.Exit(2)
	}
	if err == nil && *snapshot != "" {
		err = c.Save()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(c.State()); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
	if len(c.Skipped) > 0 {
		total := 0
		for _, n := range c.Skipped {
			total += n
		}
		counts, _ := json.Marshal(c.Skipped)
		fmt.Fprintf(os.Stderr, "skipped %d records: %s\n", total, counts)
	}
	if *verify {
		fmt.Fprintf(os.Stderr, "verification: {\"verified\": %d, \"mismatched\": %d}\n", c.Verified, c.Mismatched)
		if c.Mismatched > 0 {
			os.Exit(3)
		}
	}
}
