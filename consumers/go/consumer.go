// Package consumer rebuilds Kubernetes state from deltaship's CloudEvents streams on Kafka
// and NATS JetStream: the consumer protocol of deltaship's event contract
// (vectors/README.md in the repository), run per Kafka partition or over a JetStream
// stream, as deltaship rebuild runs it, with a callback API.
//
//	c := consumer.New(consumer.Options{Cluster: "prod", Listener: myListener})
//	err := c.KafkaRecord(partition, key, headers, value) // per record of your Kafka consumer
//	err = c.NatsMessage(headers, data)                   // per JetStream message
//	if errors.Is(err, consumer.ErrBadRecord) { c.Skip(where, err) }
//
// A record that cannot be applied returns a *BadRecord and leaves the state as it was; a
// patch that does not apply also marks its object stale, and later patches to it are
// refused until its next whole object or delete.
//
// A sync.completed whose data carries state (count and digest, vectors/README.md step 7)
// is checked against the objects held of its resource, cluster and namespace scope on its
// partition: c.Verified and c.Mismatched count the markers, Options.OnCheck is told of each
// Check, and each mismatch is reported ("state mismatch at marker ...").
//
// A consumer keeps its place: Advance records the next offset of each partition (the
// readers call it), Save writes the state, the protocol's memory and those positions to the
// Options.Snapshot file at once, atomically (Advance saves every Options.SaveEvery records),
// and Resume starts from it; the readers start each partition at its Position.
//
//	c, err := consumer.Resume(consumer.Options{Cluster: "prod", Snapshot: "prod.snapshot"})
//	err = kafka.Read(brokers, topics, c, nil) // from the saved positions to the end
//	err = c.Save()
package consumer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"strings"
)

// ContractVersion is the version of deltaship's event contract this package follows.
const ContractVersion = 2

// Listener is told of every change of the state.
type Listener interface {
	// Upsert: an object stored or replaced; resource is "<apiVersion>/<Kind>".
	Upsert(resource, key string, object json.RawMessage)
	// Delete: an object removed, by a delete event or by a full sync's completed marker.
	Delete(resource, key string)
	// Synced: a full sync of resource (in namespace, or all when empty) was completed.
	Synced(resource, namespace string)
}

// NopListener ignores everything; embed it to implement only some methods.
type NopListener struct{}

func (NopListener) Upsert(string, string, json.RawMessage) {}
func (NopListener) Delete(string, string)                  {}
func (NopListener) Synced(string, string)                  {}

// Options of a Consumer.
type Options struct {
	// Cluster: apply only this cluster's events (the cluster extension); empty: all.
	Cluster string
	// Listener: told of each change; nil: none.
	Listener Listener
	// Report: where Skip reports skipped records, and mismatched markers are reported;
	// nil: stderr.
	Report io.Writer
	// OnCheck: told of each marker whose count and digest were checked; nil: none.
	OnCheck func(Check)
	// RepeatWindow: how many of the latest event ids are remembered to skip repeats, beside
	// the last id of each object and marker scope held; 0: DefaultRepeatWindow.
	RepeatWindow int
	// Snapshot: the file Save writes the state, the protocol's memory and the positions to,
	// atomically, and Resume reads; empty: none.
	Snapshot string
	// SaveEvery: with a Snapshot, Advance saves every SaveEvery records; 0: DefaultSaveEvery.
	SaveEvery int
}

// figures is a count and a digest (the sum of terms modulo 2^128, as two halves).
type figures struct {
	count  uint64
	hi, lo uint64
}

func (f *figures) add(hi, lo uint64) {
	var carry uint64
	f.lo, carry = bits.Add64(f.lo, lo, 0)
	f.hi, _ = bits.Add64(f.hi, hi, carry)
	f.count++
}

func (f figures) digest() string { return fmt.Sprintf("%016x%016x", f.hi, f.lo) }

// term is an object's term: the first 16 bytes of SHA-256(key "\n" uid "\n"
// resourceVersion), big-endian, as two halves.
func term(key, uid, resourceVersion string) (hi, lo uint64) {
	h := sha256.Sum256([]byte(key + "\n" + uid + "\n" + resourceVersion))
	return binary.BigEndian.Uint64(h[:8]), binary.BigEndian.Uint64(h[8:16])
}

// Check is a marker's count and digest compared with the state held at it; digests are
// 32 lowercase hex digits; Namespace is nil for all namespaces.
type Check struct {
	SyncID, Cluster, Resource  string
	Namespace                  *string
	Partition                  int32
	ExpectedCount, HeldCount   uint64
	ExpectedDigest, HeldDigest string
}

// OK tells whether the held state matched the marker's figures.
func (k Check) OK() bool {
	return k.ExpectedCount == k.HeldCount && k.ExpectedDigest == k.HeldDigest
}

func (k Check) String() string {
	scope := "all namespaces"
	if k.Namespace != nil {
		scope = "namespace " + *k.Namespace
	}
	return fmt.Sprintf("marker %s of %s in %s on partition %d (cluster %s): expected count %d digest %s, held count %d digest %s",
		k.SyncID, k.Resource, scope, k.Partition, k.Cluster, k.ExpectedCount, k.ExpectedDigest, k.HeldCount, k.HeldDigest)
}

type slot struct{ resource, key string }

type home struct {
	partition int32
	cluster   string
}

// placed is where an object lives, its term, and the id of its last event.
type placed struct {
	home
	hi, lo uint64
	id     string
}

type openSync struct {
	cluster, resource string
	namespace         *string
	touched           map[string]bool
}

type syncSlot struct {
	partition int32
	id        string
}

// Consumer runs the protocol and holds the state. Not safe for concurrent use.
type Consumer struct {
	opts    Options
	state   map[string]map[string]json.RawMessage
	values  map[slot]any
	homes   map[slot]placed
	open    map[syncSlot]*openSync
	window  *window
	markers map[markerScope]string
	stale   map[slot]bool
	// positions: source (topic or stream) to partition to the next offset or sequence.
	positions map[string]map[int32]int64
	unsaved   int
	Skipped   map[string]int
	// Duplicates: events skipped as repeats (same id, same partition) of one applied.
	Duplicates int
	// Verified, Mismatched: sync.completed markers whose count and digest matched the state
	// held at them, or did not.
	Verified, Mismatched int
}

// New makes a Consumer.
func New(opts Options) *Consumer {
	if opts.Listener == nil {
		opts.Listener = NopListener{}
	}
	if opts.Report == nil {
		opts.Report = os.Stderr
	}
	if opts.RepeatWindow <= 0 {
		opts.RepeatWindow = DefaultRepeatWindow
	}
	if opts.SaveEvery <= 0 {
		opts.SaveEvery = DefaultSaveEvery
	}
	return &Consumer{opts: opts, state: map[string]map[string]json.RawMessage{}, values: map[slot]any{}, homes: map[slot]placed{}, open: map[syncSlot]*openSync{},
		window: newWindow(opts.RepeatWindow), markers: map[markerScope]string{}, stale: map[slot]bool{}, positions: map[string]map[int32]int64{}, Skipped: map[string]int{}}
}

// State is the current state: resource ("<apiVersion>/<Kind>") to key to object.
func (c *Consumer) State() map[string]map[string]json.RawMessage { return c.state }

// Skip counts a record skipped as bad (a *BadRecord; any other error is returned) and
// reports it: "skipped record <where>: <reason>: <problem>".
func (c *Consumer) Skip(where string, err error) error {
	var bad *BadRecord
	if !errors.As(err, &bad) {
		return err
	}
	c.Skipped[bad.Reason]++
	fmt.Fprintf(c.opts.Report, "skipped record %s: %v\n", where, bad)
	return nil
}

// KafkaRecord applies one Kafka record of partition (a nil value, a tombstone, is ignored).
func (c *Consumer) KafkaRecord(partition int32, key []byte, headers []Header, value []byte) error {
	r, err := decode(false, headers, value, partition)
	if err != nil || r == nil {
		return err
	}
	return c.apply(r)
}

// NatsMessage applies one JetStream message.
func (c *Consumer) NatsMessage(headers []Header, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	r, err := decode(true, headers, data, 0)
	if err != nil || r == nil {
		return err
	}
	return c.apply(r)
}

func (c *Consumer) apply(r *received) error {
	if c.opts.Cluster != "" && r.cluster != c.opts.Cluster {
		return nil
	}
	if c.repeated(r) {
		c.Duplicates++
		return nil
	}
	c.remember(r)
	if r.marker != nil {
		c.marker(r.marker, r.cluster, r.partition)
		return nil
	}
	o := r.object
	for _, s := range c.open {
		if s.resource == o.resource && s.cluster == r.cluster {
			s.touched[o.key] = true
		}
	}
	at := slot{o.resource, o.key}
	if o.change == "deleted" {
		c.remove(o.resource, o.key)
		return nil
	}
	value := o.whole
	if o.ops != nil {
		if p, held := c.homes[at]; held {
			// A patch refused below is still the object's latest event.
			p.id = r.id
			c.homes[at] = p
		}
		if c.stale[at] {
			return badf("patch_not_applied", "the object is stale: an earlier patch to it did not apply")
		}
		stored, ok := c.values[at]
		if !ok {
			return badf("patch_not_applied", "a patch for an object never received")
		}
		var err error
		if value, err = patched(stored, o.ops); err != nil {
			c.stale[at] = true
			return err
		}
	} else {
		delete(c.stale, at)
	}
	raw, err := json.Marshal(value)
	if err != nil {
		return fmt.Errorf("writing %s %s: %w", o.resource, o.key, err)
	}
	if c.state[o.resource] == nil {
		c.state[o.resource] = map[string]json.RawMessage{}
	}
	c.state[o.resource][o.key] = raw
	c.values[at] = value
	hi, lo := term(o.key, o.uid, o.resourceVersion)
	c.homes[at] = placed{home{r.partition, r.cluster}, hi, lo, r.id}
	c.opts.Listener.Upsert(o.resource, o.key, raw)
	return nil
}

func (c *Consumer) marker(m *marker, cluster string, partition int32) {
	at := syncSlot{partition, m.syncID}
	if m.started {
		if m.full {
			c.open[at] = &openSync{cluster: cluster, resource: m.resource, namespace: m.namespace, touched: map[string]bool{}}
		}
		return
	}
	if s, ok := c.open[at]; ok {
		delete(c.open, at)
		for key := range c.state[s.resource] {
			if inScope(key, s.namespace) && !s.touched[key] && c.homes[slot{s.resource, key}].home == (home{partition, s.cluster}) {
				c.remove(s.resource, key)
			}
		}
		namespace := ""
		if s.namespace != nil {
			namespace = *s.namespace
		}
		c.opts.Listener.Synced(s.resource, namespace)
	}
	if m.state != nil {
		c.check(m, cluster, partition)
	}
}

func (c *Consumer) check(m *marker, cluster string, partition int32) {
	var held figures
	for key := range c.state[m.resource] {
		if p, ok := c.homes[slot{m.resource, key}]; ok && inScope(key, m.namespace) && p.home == (home{partition, cluster}) {
			held.add(p.hi, p.lo)
		}
	}
	k := Check{SyncID: m.syncID, Cluster: cluster, Resource: m.resource, Namespace: m.namespace, Partition: partition,
		ExpectedCount: m.state.count, ExpectedDigest: m.state.digest(), HeldCount: held.count, HeldDigest: held.digest()}
	if k.OK() {
		c.Verified++
	} else {
		c.Mismatched++
		fmt.Fprintf(c.opts.Report, "state mismatch at %s\n", k)
	}
	if c.opts.OnCheck != nil {
		c.opts.OnCheck(k)
	}
}

// inScope tells whether key is within a marker's namespace scope (nil: all namespaces).
func inScope(key string, namespace *string) bool {
	ns, _, namespaced := strings.Cut(key, "/")
	return namespace == nil || namespaced && ns == *namespace
}

func (c *Consumer) remove(resource, key string) {
	at := slot{resource, key}
	delete(c.stale, at)
	objects := c.state[resource]
	if _, ok := objects[key]; ok {
		delete(objects, key)
		delete(c.values, at)
		delete(c.homes, at)
		c.opts.Listener.Delete(resource, key)
	}
	if len(objects) == 0 {
		delete(c.state, resource)
	}
}
