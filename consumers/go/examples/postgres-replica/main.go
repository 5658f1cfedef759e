// postgres-replica keeps a PostgreSQL copy of a cluster's objects from deltaship's Kafka
// topics, exact through crashes of the bridge and of this replica.
//
//	go run . --kafka kafka:9092 --topic deltaship.prod.core.configmaps \
//	    --dsn postgresql://replica@db/analytics [--cluster prod]
//
// Tables (schema.sql, created when missing): objects (the current objects), history (every
// change applied to objects), positions (per topic and partition, the next offset to apply)
// and checks (each marker's count and digest compared with the objects held). Each batch of
// records is applied, and its positions stored, in one transaction: a replica stopped at any
// moment, even by SIGKILL, starts again at the first record it had not committed.
//
// The consumer library keeps the protocol's memory (repeats seen, open syncs, which
// partition holds which object) in memory only. At start the replica rebuilds it by reading
// each partition from its beginning up to the stored position without writing, then applies
// what follows. SIGTERM or Ctrl-C stops it after the batch in hand.
package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"deltaship.dev/consumer/v2"
	"deltaship.dev/consumer/v2/kafka"
)

//go:embed schema.sql
var schema string

// lock is the advisory lock a replica holds on its database while it runs (any fixed number).
const lock = 0x64656C7461

// topics is a repeatable flag.
type topics []string

func (t *topics) String() string     { return strings.Join(*t, ",") }
func (t *topics) Set(v string) error { *t = append(*t, v); return nil }

type partition struct {
	topic     string
	partition int32
}

func run(ctx context.Context, brokers string, follow []string, dsn, cluster string) error {
	background := context.Background() // a batch in hand is finished after a stop
	db, err := pgx.Connect(background, dsn)
	if err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	defer db.Close(background)
	// One replica per database: a second would apply the same records again. The lock is
	// the session's, so a killed replica's goes with its connection.
	var locked bool
	if err := db.QueryRow(background, "SELECT pg_try_advisory_lock($1)", lock).Scan(&locked); err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	if !locked {
		fmt.Fprintln(os.Stderr, "another replica holds this database; waiting for it to stop")
		if _, err := db.Exec(background, "SELECT pg_advisory_lock($1)", lock); err != nil {
			return fmt.Errorf("PostgreSQL: %w", err)
		}
	}
	if _, err := db.Exec(background, schema); err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	stored := map[partition]int64{}
	rows, err := db.Query(background, "SELECT topic, partition, next_offset FROM positions WHERE topic = ANY($1)", follow)
	if err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	var at partition
	var next int64
	if _, err := pgx.ForEachRow(rows, []any{&at.topic, &at.partition, &next}, func() error { stored[at] = next; return nil }); err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}

	r := &replica{}
	c := consumer.New(consumer.Options{Cluster: cluster, Listener: r, OnCheck: r.check})
	started, replaying := time.Now(), false
	for _, n := range stored {
		replaying = replaying || n > 0
	}
	read := map[partition]int64{} // the next offset of each partition to come
	var applied, replayed int
	var failed error // apply's error: PostgreSQL's, or a record's that is not a bad record
	apply := func(batch []kafka.Record) (err error) {
		defer func() { failed = err }()
		tx, err := db.Begin(background)
		if err != nil {
			return fmt.Errorf("PostgreSQL: %w", err)
		}
		defer tx.Rollback(background) // nothing once committed
		r.tx = tx
		moved := map[partition]int64{}
		for _, m := range batch {
			p := partition{m.Topic, m.Partition}
			r.writing = m.Offset >= stored[p]
			r.at = position{m.Topic, m.Partition, m.Offset}
			where := fmt.Sprintf("%s/%d@%d", m.Topic, m.Partition, m.Offset)
			if err := c.Skip(where, c.KafkaRecord(m.Partition, m.Key, m.Headers, m.Value)); err != nil {
				return err
			}
			if r.err != nil {
				return fmt.Errorf("PostgreSQL: %w", r.err)
			}
			if r.writing {
				moved[p] = m.Offset + 1
				applied++
			} else {
				replayed++
			}
			read[p] = m.Offset + 1
		}
		for p, n := range moved {
			if _, err := tx.Exec(background, `INSERT INTO positions (topic, partition, next_offset) VALUES ($1, $2, $3)
				ON CONFLICT (topic, partition) DO UPDATE SET next_offset = excluded.next_offset`, p.topic, p.partition, n); err != nil {
				return fmt.Errorf("PostgreSQL: %w", err)
			}
		}
		if err := tx.Commit(background); err != nil {
			return fmt.Errorf("PostgreSQL: %w", err)
		}
		for p, n := range moved {
			stored[p] = n
		}
		if replaying && reached(read, stored) {
			replaying = false
			fmt.Fprintf(os.Stderr, "replayed %d records up to the stored positions in %.1f s\n", replayed, time.Since(started).Seconds())
		}
		return nil
	}
	// From the beginning: the records before a stored position rebuild the protocol's memory.
	if err := kafka.Follow(ctx, strings.Split(brokers, ","), follow, apply); err != nil {
		if failed != nil {
			return err
		}
		return fmt.Errorf("Kafka (%s): %w", brokers, err)
	}
	fmt.Fprintf(os.Stderr, "applied %d records; markers verified %d, mismatched %d\n", applied, c.Verified, c.Mismatched)
	return nil
}

// reached tells whether reading got to every stored position.
func reached(read, stored map[partition]int64) bool {
	for p, n := range stored {
		if n > 0 && read[p] < n {
			return false
		}
	}
	return true
}

func main() {
	var follow topics
	brokers := flag.String("kafka", "", "Kafka bootstrap servers (comma-separated)")
	flag.Var(&follow, "topic", "a topic deltaship writes (repeat for several)")
	dsn := flag.String("dsn", "", "the PostgreSQL connection (libpq URL or key=value string)")
	cluster := flag.String("cluster", "", "apply only this cluster's events")
	flag.Parse()
	if *brokers == "" || len(follow) == 0 || *dsn == "" {
		fmt.Fprintln(os.Stderr, "error: give --kafka, --topic (one or more) and --dsn")
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Errors never show the DSN: it may hold a password.
	if err := run(ctx, *brokers, follow, *dsn, *cluster); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
