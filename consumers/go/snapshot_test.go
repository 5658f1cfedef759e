package consumer

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

func vectorRecords(t *testing.T, vector string) []recorded {
	text, err := os.ReadFile(filepath.Join("../../vectors", vector, "kafka.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []recorded
	for _, line := range strings.Split(strings.TrimSpace(string(text)), "\n") {
		var r recorded
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func feed(t *testing.T, c *Consumer, rs []recorded) {
	for _, r := range rs {
		headers := make([]Header, 0, len(r.Headers))
		for _, h := range r.Headers {
			headers = append(headers, Header{Key: h[0], Value: []byte(h[1])})
		}
		var value []byte
		if r.Value != nil {
			value = []byte(*r.Value)
		}
		if err := c.SkipWith("", c.KafkaRecord(r.Partition, nil, headers, value), func(string, error) {}); err != nil {
			t.Fatal(err)
		}
		if err := c.Advance(*r.Topic, r.Partition, r.Offset+1); err != nil {
			t.Fatal(err)
		}
	}
}

// normal is c's snapshot document with its lists in one order.
func normal(t *testing.T, c *Consumer) string {
	text, err := json.Marshal(c.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(text, &doc); err != nil {
		t.Fatal(err)
	}
	for _, list := range []string{"objects", "stale", "syncs", "markers"} {
		items := doc[list].([]any)
		sort.Slice(items, func(i, j int) bool {
			a, _ := json.Marshal(items[i])
			b, _ := json.Marshal(items[j])
			return string(a) < string(b)
		})
	}
	out, _ := json.Marshal(doc)
	return string(out)
}

// A consumer saved to a snapshot in the middle of a stream and resumed from it ends exactly
// as one that read the stream without stopping: same state, protocol memory and counts.
func TestAConsumerResumedFromASnapshotEndsAsOneThatNeverStopped(t *testing.T) {
	for _, vector := range []string{"initial-and-live", "duplicates", "patch", "relist-diff", "restart", "resync"} {
		rs := vectorRecords(t, vector)
		straight := New(Options{Cluster: "vectors", Report: io.Discard})
		feed(t, straight, rs)
		for _, cut := range []int{1, len(rs) / 3, len(rs) / 2, len(rs) - 1} {
			opts := Options{Cluster: "vectors", Report: io.Discard, Snapshot: filepath.Join(t.TempDir(), "s.json")}
			first := New(opts)
			feed(t, first, rs[:cut])
			if err := first.Save(); err != nil {
				t.Fatal(err)
			}
			resumed, err := Resume(opts)
			if err != nil {
				t.Fatal(err)
			}
			last := rs[cut-1]
			if next, ok := resumed.Position(*last.Topic, last.Partition); !ok || next != last.Offset+1 {
				t.Fatalf("%s cut at %d: position %d %v", vector, cut, next, ok)
			}
			feed(t, resumed, rs[cut:])
			if got, want := normal(t, resumed), normal(t, straight); got != want {
				t.Fatalf("%s, cut at %d:\n%s\nwant\n%s", vector, cut, got, want)
			}
		}
	}
}

func TestASnapshotSavesItselfEverySaveEveryRecordsAndResumesWithItsClusterOnly(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Cluster: "vectors", Report: io.Discard, Snapshot: filepath.Join(dir, "s.json"), SaveEvery: 2}
	feed(t, New(opts), vectorRecords(t, "initial-and-live")[:3])
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "s.json" {
		t.Fatalf("the snapshot alone, no temporary file: %v", entries)
	}
	other := opts
	other.Cluster = "other"
	if _, err := Resume(other); err == nil || !strings.Contains(err.Error(), `taken with cluster "vectors"`) {
		t.Fatalf("another cluster: %v", err)
	}
	if err := os.WriteFile(opts.Snapshot, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Resume(opts); err == nil || !strings.Contains(err.Error(), "not a snapshot") {
		t.Fatalf("an empty document: %v", err)
	}
	fresh, err := Resume(Options{Snapshot: filepath.Join(dir, "none.json")})
	if err != nil || len(fresh.State()) != 0 {
		t.Fatalf("no file: a new consumer: %v", err)
	}
}
