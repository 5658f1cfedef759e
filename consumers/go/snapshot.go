package consumer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// SnapshotFormat is the version of the snapshot file's format this package writes and reads
// (docs/consumers/README.md in the repository, "Resuming from a snapshot").
const SnapshotFormat = 1

// DefaultSaveEvery is how many records a Consumer with a snapshot file advances past between
// two saves by default (Options.SaveEvery): each save writes the whole state and repeat
// window.
const DefaultSaveEvery = 10_000

type snapshotDoc struct {
	Snapshot   int                                             `json:"snapshot"`
	Contract   int                                             `json:"contract"`
	Cluster    *string                                         `json:"cluster"`
	Positions  map[string]map[string]int64                     `json:"positions"`
	State      map[string]map[string]json.RawMessage           `json:"state"`
	Objects    []snapshotObject                                `json:"objects"`
	Stale      []snapshotSlot                                  `json:"stale"`
	Syncs      []snapshotSync                                  `json:"syncs"`
	Markers    []snapshotMarker                                `json:"markers"`
	Window     struct{ Previous, Current map[string][]string } `json:"window"`
	Duplicates int                                             `json:"duplicates"`
	Verified   int                                             `json:"verified"`
	Mismatched int                                             `json:"mismatched"`
	Skipped    map[string]int                                  `json:"skipped"`
}

type snapshotSlot struct {
	Resource string `json:"resource"`
	Key      string `json:"key"`
}

type snapshotObject struct {
	Resource  string `json:"resource"`
	Key       string `json:"key"`
	Partition int32  `json:"partition"`
	Cluster   string `json:"cluster"`
	Term      string `json:"term"`
	ID        string `json:"id"`
}

type snapshotSync struct {
	Partition int32    `json:"partition"`
	SyncID    string   `json:"syncId"`
	Cluster   string   `json:"cluster"`
	Resource  string   `json:"resource"`
	Namespace *string  `json:"namespace"`
	Touched   []string `json:"touched"`
}

type snapshotMarker struct {
	Partition int32   `json:"partition"`
	Cluster   string  `json:"cluster"`
	Resource  string  `json:"resource"`
	Namespace *string `json:"namespace"`
	Full      bool    `json:"full"`
	Started   bool    `json:"started"`
	ID        string  `json:"id"`
}

// Position is the offset (JetStream: stream sequence) of the next record to read of
// source's partition; false when none was read. The readers start there.
func (c *Consumer) Position(source string, partition int32) (int64, bool) {
	next, ok := c.positions[source][partition]
	return next, ok
}

// Advance records that the records of source's partition before next were applied (or
// skipped); the readers call it after each record. With Options.Snapshot it saves the
// snapshot when Options.SaveEvery records passed since the last save.
func (c *Consumer) Advance(source string, partition int32, next int64) error {
	if c.positions[source] == nil {
		c.positions[source] = map[int32]int64{}
	}
	c.positions[source][partition] = next
	c.unsaved++
	if c.opts.Snapshot != "" && c.unsaved >= c.opts.SaveEvery {
		return c.Save()
	}
	return nil
}

// Save writes the snapshot (the state, the protocol's memory, the positions) to
// Options.Snapshot atomically: a crash at any moment leaves the previous snapshot or this one.
func (c *Consumer) Save() error {
	if c.opts.Snapshot == "" {
		return errors.New("no snapshot file to save to: set Options.Snapshot")
	}
	text, err := json.Marshal(c.snapshot())
	if err != nil {
		return fmt.Errorf("writing the snapshot %s: %w", c.opts.Snapshot, err)
	}
	if err := WriteAtomically(c.opts.Snapshot, text); err != nil {
		return err
	}
	c.unsaved = 0
	return nil
}

// Resume makes the Consumer saved in the file opts.Snapshot, saving there again, or a new
// one when there is no such file yet. The listener is not told of the state restored. It
// fails when the file is not a snapshot, or was taken with another opts.Cluster.
func Resume(opts Options) (*Consumer, error) {
	if opts.Snapshot == "" {
		return nil, errors.New("Resume needs Options.Snapshot: the snapshot file")
	}
	c := New(opts)
	text, err := os.ReadFile(opts.Snapshot)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	var doc snapshotDoc
	if err := json.Unmarshal(text, &doc); err != nil {
		return nil, fmt.Errorf("%s is not a snapshot: %w", opts.Snapshot, err)
	}
	if err := c.restore(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", opts.Snapshot, err)
	}
	return c, nil
}

func (c *Consumer) snapshot() *snapshotDoc {
	d := &snapshotDoc{Snapshot: SnapshotFormat, Contract: ContractVersion, Positions: map[string]map[string]int64{}, State: c.state,
		Objects: []snapshotObject{}, Stale: []snapshotSlot{}, Syncs: []snapshotSync{}, Markers: []snapshotMarker{},
		Duplicates: c.Duplicates, Verified: c.Verified, Mismatched: c.Mismatched, Skipped: c.Skipped}
	if c.opts.Cluster != "" {
		d.Cluster = &c.opts.Cluster
	}
	for source, parts := range c.positions {
		d.Positions[source] = map[string]int64{}
		for p, next := range parts {
			d.Positions[source][strconv.Itoa(int(p))] = next
		}
	}
	for at, p := range c.homes {
		d.Objects = append(d.Objects, snapshotObject{at.resource, at.key, p.partition, p.cluster, fmt.Sprintf("%016x%016x", p.hi, p.lo), p.id})
	}
	for at := range c.stale {
		d.Stale = append(d.Stale, snapshotSlot{at.resource, at.key})
	}
	for at, s := range c.open {
		touched := make([]string, 0, len(s.touched))
		for key := range s.touched {
			touched = append(touched, key)
		}
		sort.Strings(touched)
		d.Syncs = append(d.Syncs, snapshotSync{at.partition, at.id, s.cluster, s.resource, s.namespace, touched})
	}
	for s, id := range c.markers {
		m := snapshotMarker{Partition: s.partition, Cluster: s.cluster, Resource: s.resource, Full: s.full, Started: s.started, ID: id}
		if !s.allNamespaces {
			ns := s.namespace
			m.Namespace = &ns
		}
		d.Markers = append(d.Markers, m)
	}
	d.Window.Previous, d.Window.Current = byPartition(c.window.previous), byPartition(c.window.current)
	return d
}

func byPartition(ids map[seenID]struct{}) map[string][]string {
	out := map[string][]string{}
	for s := range ids {
		p := strconv.Itoa(int(s.partition))
		out[p] = append(out[p], s.id)
	}
	for _, list := range out {
		sort.Strings(list)
	}
	return out
}

func (c *Consumer) restore(d *snapshotDoc) error {
	if d.Snapshot != SnapshotFormat {
		return fmt.Errorf("not a snapshot of format %d (it says %d): take a new one with this package", SnapshotFormat, d.Snapshot)
	}
	if d.Contract != ContractVersion {
		return fmt.Errorf("taken under event contract %d; this package reads contract %d", d.Contract, ContractVersion)
	}
	if taken := derefOr(d.Cluster, ""); taken != c.opts.Cluster {
		return fmt.Errorf("taken with cluster %q: resume it with Options.Cluster %q, or start a new snapshot", taken, taken)
	}
	for source, parts := range d.Positions {
		c.positions[source] = map[int32]int64{}
		for p, next := range parts {
			n, err := strconv.ParseInt(p, 10, 32)
			if err != nil {
				return fmt.Errorf("position of %s: partition %q is not a number", source, p)
			}
			c.positions[source][int32(n)] = next
		}
	}
	for resource, objects := range d.State {
		c.state[resource] = map[string]json.RawMessage{}
		for key, raw := range objects {
			value, err := parseJSON(raw)
			if err != nil {
				return fmt.Errorf("object %s %s: %w", resource, key, err)
			}
			c.state[resource][key] = raw
			c.values[slot{resource, key}] = value
		}
	}
	for _, o := range d.Objects {
		t, ok := new(big.Int).SetString(o.Term, 16)
		if !ok || len(o.Term) != 32 {
			return fmt.Errorf("object %s %s: term %q is not 32 hex digits", o.Resource, o.Key, o.Term)
		}
		lo := new(big.Int).And(t, new(big.Int).SetUint64(^uint64(0))).Uint64()
		hi := new(big.Int).Rsh(t, 64).Uint64()
		c.homes[slot{o.Resource, o.Key}] = placed{home{o.Partition, o.Cluster}, hi, lo, o.ID}
	}
	for _, s := range d.Stale {
		c.stale[slot{s.Resource, s.Key}] = true
	}
	for _, s := range d.Syncs {
		touched := map[string]bool{}
		for _, key := range s.Touched {
			touched[key] = true
		}
		c.open[syncSlot{s.Partition, s.SyncID}] = &openSync{cluster: s.Cluster, resource: s.Resource, namespace: s.Namespace, touched: touched}
	}
	for _, m := range d.Markers {
		c.markers[markerScope{partition: m.Partition, cluster: m.Cluster, resource: m.Resource, namespace: derefOr(m.Namespace, ""),
			allNamespaces: m.Namespace == nil, full: m.Full, started: m.Started}] = m.ID
	}
	for p, ids := range d.Window.Previous {
		if err := fill(c.window.previous, p, ids); err != nil {
			return err
		}
	}
	for p, ids := range d.Window.Current {
		if err := fill(c.window.current, p, ids); err != nil {
			return err
		}
	}
	c.Duplicates, c.Verified, c.Mismatched = d.Duplicates, d.Verified, d.Mismatched
	for reason, n := range d.Skipped {
		c.Skipped[reason] = n
	}
	return nil
}

func fill(ids map[seenID]struct{}, partition string, list []string) error {
	p, err := strconv.ParseInt(partition, 10, 32)
	if err != nil {
		return fmt.Errorf("window: partition %q is not a number", partition)
	}
	for _, id := range list {
		ids[seenID{int32(p), id}] = struct{}{}
	}
	return nil
}

func derefOr(s *string, otherwise string) string {
	if s == nil {
		return otherwise
	}
	return *s
}

// WriteAtomically replaces the file at path with text: written to a temporary file beside
// it, flushed to disk, renamed over it, and the directory flushed, so that at any moment the
// file is the old one or the new one, complete, also after a crash of the process or host.
func WriteAtomically(path string, text []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = f.Write(text)
	if err == nil {
		err = f.Sync()
	}
	if closed := f.Close(); err == nil {
		err = closed
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	// The rename itself is durable once the directory is.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
