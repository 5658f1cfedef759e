package consumer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestVectors holds the consumer to every shared test vector of the repository.
func TestVectors(t *testing.T) {
	dirs, err := filepath.Glob("../../vectors/*/expected.json")
	if err != nil || len(dirs) < 8 {
		t.Fatalf("vectors: %v %v", dirs, err)
	}
	checked := 0
	for _, expectedPath := range dirs {
		dir := filepath.Dir(expectedPath)
		var expected struct {
			Clusters     map[string]map[string]map[string]any `json:"clusters"`
			Verification map[string]verification              `json:"verification"`
		}
		raw, err := os.ReadFile(expectedPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &expected); err != nil {
			t.Fatal(err)
		}
		for _, stream := range []string{"kafka.jsonl", "nats.jsonl"} {
			file := filepath.Join(dir, stream)
			if _, err := os.Stat(file); err != nil {
				continue
			}
			checked++
			for cluster, want := range expected.Clusters {
				c := New(Options{Cluster: cluster})
				if err := ReadRecords(file, c, func(where string, err error) { t.Errorf("%s: a record of a real run skipped: %v", where, err) }); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				got := map[string]map[string]any{}
				for resource, objects := range c.State() {
					got[resource] = map[string]any{}
					for key, object := range objects {
						var v any
						if err := json.Unmarshal(object, &v); err != nil {
							t.Fatal(err)
						}
						got[resource][key] = v
					}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s, cluster %s: rebuilt state differs from expected.json", file, cluster)
				}
				if c.Mismatched != 0 {
					t.Errorf("%s, cluster %s: %d markers' count and digest did not match", file, cluster, c.Mismatched)
				}
				// verification counts the Kafka copies (one per partition); a stream holds one of each.
				if v, ok := expected.Verification[cluster]; ok && strings.HasSuffix(file, "kafka.jsonl") && v.Verified != c.Verified {
					t.Errorf("%s, cluster %s: %d markers verified, want %d", file, cluster, c.Verified, v.Verified)
				} else if ok && c.Verified == 0 {
					t.Errorf("%s, cluster %s: no marker verified", file, cluster)
				}
			}
		}
	}
	if checked < 15 {
		t.Fatalf("only %d recorded streams", checked)
	}
}

type recorder struct {
	NopListener
	upserts, deletes []string
}

func (r *recorder) Upsert(resource, key string, _ json.RawMessage) {
	r.upserts = append(r.upserts, key)
}
func (r *recorder) Delete(resource, key string) { r.deletes = append(r.deletes, key) }

// TestListener: the restart vector's second initial sync removes what was deleted while
// the bridge was down, and the listener hears of it.
func TestListener(t *testing.T) {
	r := &recorder{}
	c := New(Options{Listener: r})
	if err := ReadRecords("../../vectors/restart/kafka.jsonl", c, nil); err != nil {
		t.Fatal(err)
	}
	if len(r.upserts) == 0 || len(r.deletes) != 1 {
		t.Fatalf("upserts %v, deletes %v", r.upserts, r.deletes)
	}
}
