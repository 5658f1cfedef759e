package consumer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

type expectation struct {
	Clusters map[string]map[string]map[string]any `json:"clusters"`
	Skipped  map[string]map[string]int            `json:"skipped"`
}

// rebuilt is c's state as plain JSON values (numbers float64, as in the expectation).
func rebuilt(t *testing.T, c *Consumer) map[string]map[string]any {
	got := map[string]map[string]any{}
	for resource, objects := range c.State() {
		got[resource] = map[string]any{}
		for key, object := range objects {
			var v any
			if err := json.Unmarshal(object, &v); err != nil {
				t.Fatalf("%s %s: %v", resource, key, err)
			}
			got[resource][key] = v
		}
	}
	return got
}

func hostileCases(t *testing.T) []string {
	cases, err := filepath.Glob("../../vectors/hostile/*/expected.json")
	if err != nil || len(cases) < 30 {
		t.Fatalf("hostile vectors: %d %v", len(cases), err)
	}
	return cases
}

func streamOf(dir string) string {
	for _, name := range []string{"kafka.jsonl", "nats.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return filepath.Join(dir, name)
		}
	}
	return ""
}

// TestHostileVectors holds the consumer to every hostile vector: its state, and exactly its
// records skipped, by reason.
func TestHostileVectors(t *testing.T) {
	for _, expectedPath := range hostileCases(t) {
		dir := filepath.Dir(expectedPath)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var expected expectation
			raw, err := os.ReadFile(expectedPath)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &expected); err != nil {
				t.Fatal(err)
			}
			for cluster, want := range expected.Clusters {
				c := New(Options{Cluster: cluster, Report: &bytes.Buffer{}})
				started := time.Now()
				if err := ReadRecords(streamOf(dir), c, nil); err != nil {
					t.Fatal(err)
				}
				if got := rebuilt(t, c); !reflect.DeepEqual(got, want) {
					t.Errorf("cluster %s: state %v, want %v", cluster, got, want)
				}
				if !reflect.DeepEqual(c.Skipped, expected.Skipped[cluster]) {
					t.Errorf("cluster %s: skipped %v, want %v", cluster, c.Skipped, expected.Skipped[cluster])
				}
				if took := time.Since(started); took > 30*time.Second {
					t.Errorf("took %v", took)
				}
			}
		})
	}
}

// TestTheCommandPrintsTheStateOfEveryHostileVector: valid JSON on stdout and one report
// line per skipped record, whatever the records.
func TestTheCommandPrintsTheStateOfEveryHostileVector(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rebuild")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/deltaship-rebuild").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, expectedPath := range hostileCases(t) {
		dir := filepath.Dir(expectedPath)
		var expected expectation
		raw, _ := os.ReadFile(expectedPath)
		if err := json.Unmarshal(raw, &expected); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-records", streamOf(dir), "-cluster", "c1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v: %s", dir, err, stderr.String())
		}
		var state map[string]map[string]any
		if err := json.Unmarshal(out, &state); err != nil || !reflect.DeepEqual(state, expected.Clusters["c1"]) {
			t.Errorf("%s: printed %s (%v)", dir, out, err)
		}
		reported := map[string]int{}
		for _, line := range strings.Split(stderr.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, "skipped record "); ok {
				reported[strings.Split(rest, ": ")[1]]++
			}
		}
		if !reflect.DeepEqual(reported, expected.Skipped["c1"]) {
			t.Errorf("%s: reported %v, want %v", dir, reported, expected.Skipped["c1"])
		}
	}
}

// bigRecord is a Kafka line of an added whose value is size bytes (vectors/README.md,
// "Hostile vectors").
func bigRecord(name string, size int) string {
	head := fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"ns"},"data":{"big":""}}`, name)
	value := head[:len(head)-3] + strings.Repeat("x", size-len(head)) + head[len(head)-3:]
	line, _ := json.Marshal(map[string]any{"topic": "big", "partition": 0, "offset": 0, "key": nil, "value": value, "headers": [][2]string{
		{"ce_id", name}, {"ce_type", "dev.deltaship.object.added"}, {"ce_subject", "ns/" + name}, {"ce_apiversion", "v1"}, {"ce_kind", "ConfigMap"}, {"ce_cluster", "c1"},
	}})
	return string(line) + "\n"
}

// TestARecordOfTheSizeBoundIsAppliedAndALargerOneSkipped: lines far over 16 MB are read.
func TestARecordOfTheSizeBoundIsAppliedAndALargerOneSkipped(t *testing.T) {
	file := filepath.Join(t.TempDir(), "big.jsonl")
	if err := os.WriteFile(file, []byte(bigRecord("a", MaxRecordBytes)+bigRecord("b", 20_000_001)+bigRecord("c", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := New(Options{Cluster: "c1", Report: &bytes.Buffer{}})
	if err := ReadRecords(file, c, nil); err != nil {
		t.Fatal(err)
	}
	objects := c.State()["v1/ConfigMap"]
	if len(objects) != 2 || objects["ns/a"] == nil || objects["ns/c"] == nil {
		t.Fatalf("objects: %d", len(objects))
	}
	if len(objects["ns/a"]) != MaxRecordBytes || !reflect.DeepEqual(c.Skipped, map[string]int{"too_large": 1}) {
		t.Fatalf("ns/a is %d bytes; skipped %v", len(objects["ns/a"]), c.Skipped)
	}
}
