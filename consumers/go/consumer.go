// Package consumer rebuilds Kubernetes state from deltaship's CloudEvents streams on Kafka
// and NATS JetStream: the consumer protocol of deltaship's event contract
// (vectors/README.md in the repository), run per Kafka partition or over a JetStream
// stream, with a callback API.
//
//	c := consumer.New(consumer.Options{Cluster: "prod", Listener: myListener})
//	err := c.KafkaRecord(partition, key, headers, value) // per record of your Kafka consumer
//	err = c.NatsMessage(headers, data)                   // per JetStream message
package consumer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
	jsonpatch "github.com/evanphx/json-patch/v5"
)

const (
	typePrefix = "dev.deltaship."
	started    = "dev.deltaship.sync.started"
	completed  = "dev.deltaship.sync.completed"
	deleted    = "dev.deltaship.object.deleted"
	jsonPatch  = "application/json-patch+json"
)

// ErrBadRecord marks a record the protocol cannot apply (not a CloudEvent, a marker
// without its data, a patch that does not apply); the state is left as it was.
var ErrBadRecord = errors.New("bad record")

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
}

type slot struct{ resource, key string }

type home struct {
	partition int32
	cluster   string
}

type openSync struct {
	cluster, resource, namespace string
	touched                      map[string]bool
}

// Consumer runs the protocol and holds the state. Not safe for concurrent use.
type Consumer struct {
	opts       Options
	state      map[string]map[string]json.RawMessage
	homes      map[slot]home
	open       map[string]*openSync
	seen       map[string]bool
	Duplicates int
}

// New makes a Consumer.
func New(opts Options) *Consumer {
	if opts.Listener == nil {
		opts.Listener = NopListener{}
	}
	return &Consumer{opts: opts, state: map[string]map[string]json.RawMessage{}, homes: map[slot]home{}, open: map[string]*openSync{}, seen: map[string]bool{}}
}

// State is the current state: resource ("<apiVersion>/<Kind>") to key to object.
func (c *Consumer) State() map[string]map[string]json.RawMessage { return c.state }

func ext(e *event.Event, name string) string {
	v, ok := e.Extensions()[name]
	if !ok {
		return ""
	}
	return fmt.Sprint(v)
}

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRecord, fmt.Sprintf(format, args...))
}

// Apply applies one CloudEvent read from partition (0 for JetStream).
func (c *Consumer) Apply(e *event.Event, partition int32) error {
	kind := e.Type()
	if !strings.HasPrefix(kind, typePrefix) {
		return nil
	}
	cluster := ext(e, "cluster")
	if c.opts.Cluster != "" && cluster != c.opts.Cluster {
		return nil
	}
	id := fmt.Sprintf("%d/%s", partition, e.ID())
	if c.seen[id] {
		c.Duplicates++
		return nil
	}
	c.seen[id] = true
	if kind == started || kind == completed {
		return c.marker(kind == started, e.Data(), cluster, partition)
	}
	resource := ext(e, "apiversion") + "/" + ext(e, "kind")
	key := e.Subject()
	if key == "" {
		return bad("%s %s has no subject", kind, e.ID())
	}
	for _, s := range c.open {
		if s.resource == resource && s.cluster == cluster {
			s.touched[key] = true
		}
	}
	if kind == deleted {
		c.remove(resource, key)
		return nil
	}
	objects := c.state[resource]
	if objects == nil {
		objects = map[string]json.RawMessage{}
		c.state[resource] = objects
	}
	data := json.RawMessage(e.Data())
	if e.DataContentType() == jsonPatch {
		stored, ok := objects[key]
		if !ok {
			return bad("a patch for %s %s, never received", resource, key)
		}
		patch, err := jsonpatch.DecodePatch(data)
		if err != nil {
			return bad("the patch for %s %s: %v", resource, key, err)
		}
		if data, err = patch.Apply(stored); err != nil {
			return bad("the patch for %s %s does not apply: %v", resource, key, err)
		}
	}
	objects[key] = data
	c.homes[slot{resource, key}] = home{partition, cluster}
	c.opts.Listener.Upsert(resource, key, data)
	return nil
}

type markerData struct {
	SyncID    string `json:"syncId"`
	Mode      string `json:"mode"`
	Namespace string `json:"namespace"`
	Resource  struct {
		Group, Version, Kind string
	} `json:"resource"`
}

func (c *Consumer) marker(isStart bool, raw []byte, cluster string, partition int32) error {
	var m markerData
	if err := json.Unmarshal(raw, &m); err != nil || m.SyncID == "" {
		return bad("a marker without its data")
	}
	resource := m.Resource.Version + "/" + m.Resource.Kind
	if m.Resource.Group != "" {
		resource = m.Resource.Group + "/" + resource
	}
	at := fmt.Sprintf("%d/%s", partition, m.SyncID)
	if isStart {
		if m.Mode == "full" {
			c.open[at] = &openSync{cluster: cluster, resource: resource, namespace: m.Namespace, touched: map[string]bool{}}
		}
		return nil
	}
	s, ok := c.open[at]
	if !ok {
		return nil
	}
	delete(c.open, at)
	for key := range c.state[s.resource] {
		inScope := s.namespace == "" || strings.HasPrefix(key, s.namespace+"/")
		if inScope && !s.touched[key] && c.homes[slot{s.resource, key}] == (home{partition, s.cluster}) {
			c.remove(s.resource, key)
		}
	}
	c.opts.Listener.Synced(s.resource, s.namespace)
	return nil
}

func (c *Consumer) remove(resource, key string) {
	objects := c.state[resource]
	if _, ok := objects[key]; ok {
		delete(objects, key)
		delete(c.homes, slot{resource, key})
		c.opts.Listener.Delete(resource, key)
	}
	if len(objects) == 0 {
		delete(c.state, resource)
	}
}
