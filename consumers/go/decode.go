package consumer

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// One Kafka record or JetStream message to a step of the consumer protocol, or the reason
// it is bad, by the rules every consumer of the repository shares with deltaship rebuild
// (vectors/README.md, "Decoding a record").

const (
	structured = "application/cloudevents+json"
	jsonPatch  = "application/json-patch+json"
)

// Header is one record or message header.
type Header struct {
	Key   string
	Value []byte
}

// BadRecord is a record the protocol cannot apply; the state is left as it was. Reason is
// one of vectors/README.md's: empty, too_large, not_json, truncated, too_deep,
// missing_attribute, wrong_type, patch_not_applied.
type BadRecord struct {
	Reason, Problem string
}

func (b *BadRecord) Error() string { return b.Reason + ": " + b.Problem }

// Is makes errors.Is(err, ErrBadRecord) true for every BadRecord.
func (b *BadRecord) Is(target error) bool { return target == ErrBadRecord }

// ErrBadRecord matches every *BadRecord (errors.Is).
var ErrBadRecord = errors.New("bad record")

func badf(reason, format string, args ...any) error {
	return &BadRecord{Reason: reason, Problem: fmt.Sprintf(format, args...)}
}

type marker struct {
	started   bool
	syncID    string
	full      bool
	resource  string
	namespace *string
	// state: a completed marker's count and digest, or nil.
	state *figures
}

type object struct {
	change, resource, key string
	// uid, resourceVersion: the extensions ("" when absent).
	uid, resourceVersion string
	// whole: the object; ops: a patch's operations; neither for deleted.
	whole any
	ops   []map[string]any
}

type received struct {
	id, cluster string
	partition   int32
	marker      *marker
	object      *object
}

// decode is the event of one record; nil (and no error) for a tombstone or a foreign type.
func decode(nats bool, headers []Header, value []byte, partition int32) (*received, error) {
	if value == nil {
		return nil, nil
	}
	if len(value) == 0 {
		return nil, badf("empty", "the value is empty")
	}
	if len(value) > MaxRecordBytes {
		return nil, badf("too_large", "the value is %d bytes, more than %d", len(value), MaxRecordBytes)
	}
	header := func(name string) (*string, error) {
		var raw []byte
		found := false
		for _, h := range headers {
			if asciiEqualFold(h.Key, name) {
				raw, found = h.Value, true
			}
		}
		if !found {
			return nil, nil
		}
		if nats {
			raw = percentDecode(raw)
		}
		if !utf8.Valid(raw) {
			return nil, badf("wrong_type", "header %s is not UTF-8", name)
		}
		s := string(raw)
		return &s, nil
	}
	contentType, err := header("content-type")
	if err != nil {
		return nil, err
	}
	if contentType != nil && strings.HasPrefix(*contentType, structured) {
		v, err := parseJSON(value)
		if err != nil {
			return nil, err
		}
		event, ok := v.(map[string]any)
		if !ok {
			return nil, badf("wrong_type", "the structured event is %s, not a JSON object", kindOf(v))
		}
		text := func(name string) (*string, error) {
			switch a := event[name].(type) {
			case nil:
				return nil, nil
			case string:
				return &a, nil
			default:
				return nil, badf("wrong_type", "attribute %s is %s, not a string", name, kindOf(a))
			}
		}
		return eventOf(text, func() (any, error) { return event["data"], nil }, partition)
	}
	prefix := "ce_"
	if nats {
		prefix = "ce-"
	}
	attribute := func(name string) (*string, error) {
		a, err := header(prefix + name)
		if a == nil && err == nil && name == "datacontenttype" {
			return contentType, nil
		}
		return a, err
	}
	return eventOf(attribute, func() (any, error) { return parseJSON(value) }, partition)
}

func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

var changes = map[string]string{"object.added": "added", "object.updated": "updated", "object.synced": "synced", "object.deleted": "deleted"}

func eventOf(attribute func(string) (*string, error), data func() (any, error), partition int32) (*received, error) {
	required := func(name string) (string, error) {
		a, err := attribute(name)
		if err != nil {
			return "", err
		}
		if a == nil || *a == "" {
			return "", badf("missing_attribute", "no %s attribute", name)
		}
		return *a, nil
	}
	ty, err := required("type")
	if err != nil {
		return nil, err
	}
	short, ours := strings.CutPrefix(ty, "dev.deltaship.")
	change, isObject := changes[short]
	if !ours || !isObject && short != "sync.started" && short != "sync.completed" {
		return nil, nil
	}
	r := &received{partition: partition}
	if r.id, err = required("id"); err != nil {
		return nil, err
	}
	cluster, err := attribute("cluster")
	if err != nil {
		return nil, err
	}
	if cluster != nil {
		r.cluster = *cluster
	}
	d, err := data()
	if err != nil {
		return nil, err
	}
	if !isObject {
		r.marker, err = markerOf(short == "sync.started", d)
		return r, err
	}
	o := &object{change: change}
	apiVersion, err := required("apiversion")
	if err != nil {
		return nil, err
	}
	kind, err := required("kind")
	if err != nil {
		return nil, err
	}
	o.resource = apiVersion + "/" + kind
	if o.key, err = required("subject"); err != nil {
		return nil, err
	}
	r.object = o
	if change != "deleted" {
		if d == nil {
			return nil, badf("missing_attribute", "no data")
		}
		contentType, err := attribute("datacontenttype")
		if err != nil {
			return nil, err
		}
		if contentType != nil && *contentType == jsonPatch {
			if o.ops, err = operations(d); err != nil {
				return nil, err
			}
		} else if _, ok := d.(map[string]any); !ok {
			return nil, badf("wrong_type", "the data is %s, not an object", kindOf(d))
		} else {
			o.whole = d
		}
	}
	// The count-and-digest term's identity: absent is "".
	for _, e := range []struct {
		name string
		into *string
	}{{"uid", &o.uid}, {"resourceversion", &o.resourceVersion}} {
		name, into := e.name, e.into
		a, err := attribute(name)
		if err != nil {
			return nil, err
		}
		if a != nil {
			*into = *a
		}
	}
	return r, nil
}

func markerOf(started bool, data any) (*marker, error) {
	if data == nil {
		return nil, badf("missing_attribute", "a marker without data")
	}
	field := func(required bool, path ...string) (*string, error) {
		v := data
		for _, name := range path {
			m, _ := v.(map[string]any)
			v = m[name]
		}
		switch x := v.(type) {
		case nil:
			if required {
				return nil, badf("missing_attribute", "a marker without /%s", strings.Join(path, "/"))
			}
			return nil, nil
		case string:
			return &x, nil
		default:
			return nil, badf("wrong_type", "a marker's /%s is %s, not a string", strings.Join(path, "/"), kindOf(x))
		}
	}
	syncID, err := field(true, "syncId")
	if err != nil {
		return nil, err
	}
	version, err := field(true, "resource", "version")
	if err != nil {
		return nil, err
	}
	kind, err := field(true, "resource", "kind")
	if err != nil {
		return nil, err
	}
	group, err := field(false, "resource", "group")
	if err != nil {
		return nil, err
	}
	resource := *version + "/" + *kind
	if group != nil && *group != "" {
		resource = *group + "/" + resource
	}
	mode, err := field(false, "mode")
	if err != nil {
		return nil, err
	}
	namespace, err := field(false, "namespace")
	if err != nil {
		return nil, err
	}
	m := &marker{started: started, syncID: *syncID, full: mode != nil && *mode == "full", resource: resource, namespace: namespace}
	if !started {
		fields, _ := data.(map[string]any)
		if m.state, err = stateOf(fields["state"]); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// stateOf is a completed marker's state: absent or null, or {"count": <integer from 0>,
// "digest": "<32 lowercase hex digits>"} (a member absent: missing_attribute; anything
// else: wrong_type).
func stateOf(v any) (*figures, error) {
	if v == nil {
		return nil, nil
	}
	state, ok := v.(map[string]any)
	if !ok {
		return nil, badf("wrong_type", "a marker's /state is %s, not an object", kindOf(v))
	}
	var f figures
	switch c := state["count"].(type) {
	case nil:
		return nil, badf("missing_attribute", "a marker without /state/count")
	case json.Number:
		n, _ := number(c)
		if n == nil || n.Sign() < 0 || !n.IsUint64() {
			return nil, badf("wrong_type", "a marker's /state/count is %s, not an integer from 0", c)
		}
		f.count = n.Uint64()
	default:
		return nil, badf("wrong_type", "a marker's /state/count is %s, not an integer from 0", kindOf(c))
	}
	switch d := state["digest"].(type) {
	case nil:
		return nil, badf("missing_attribute", "a marker without /state/digest")
	case string:
		if len(d) != 32 || strings.Trim(d, "0123456789abcdef") != "" {
			return nil, badf("wrong_type", "a marker's /state/digest is %q, not 32 lowercase hex digits", d)
		}
		b, _ := hex.DecodeString(d)
		f.hi, f.lo = binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	default:
		return nil, badf("wrong_type", "a marker's /state/digest is %s, not 32 lowercase hex digits", kindOf(d))
	}
	return &f, nil
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "a number"
}

// percentDecode undoes the NATS binding's percent-encoding: %XX is a byte, anything else
// stays as it is.
func percentDecode(b []byte) []byte {
	if bytes.IndexByte(b, '%') < 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '%' && i+2 < len(b) && isHex(b[i+1]) && isHex(b[i+2]) {
			out = append(out, unhex(b[i+1])<<4|unhex(b[i+2]))
			i += 2
			continue
		}
		out = append(out, b[i])
	}
	return out
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
