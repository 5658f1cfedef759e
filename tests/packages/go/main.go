// vectors-check rebuilds every shared test vector through the deltaship.dev/consumer/v2
// module as a user's build resolves it, and prints one JSON line: what was checked and what
// failed.
//
//	go run . VECTORS_DIR
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"

	"deltaship.dev/consumer/v2"
)

type expectation struct {
	Clusters     map[string]map[string]map[string]any `json:"clusters"`
	Skipped      map[string]map[string]int            `json:"skipped"`
	Verification map[string]struct {
		Verified, Mismatched int
	} `json:"verification"`
}

func main() {
	vectors := os.Args[1]
	var cases []string
	for _, pattern := range []string{"*/expected.json", "*/*/expected.json"} {
		found, _ := filepath.Glob(filepath.Join(vectors, pattern))
		sort.Strings(found)
		cases = append(cases, found...)
	}
	checked, failures := 0, []string{}
	for _, path := range cases {
		dir := filepath.Dir(path)
		raw, err := os.ReadFile(path)
		var expected expectation
		if err == nil {
			err = json.Unmarshal(raw, &expected)
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		var streams []string
		for _, f := range []string{"kafka.jsonl", "nats.jsonl"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				streams = append(streams, filepath.Join(dir, f))
			}
		}
		for i, stream := range streams {
			for cluster, want := range expected.Clusters {
				what := fmt.Sprintf("%s, cluster %s", stream, cluster)
				c := consumer.New(consumer.Options{Cluster: cluster, Report: io.Discard})
				if err := consumer.ReadRecords(stream, c, func(string, error) {}); err != nil {
					failures = append(failures, fmt.Sprintf("%s: %v", what, err))
					continue
				}
				got := map[string]map[string]any{}
				for resource, objects := range c.State() {
					got[resource] = map[string]any{}
					for key, object := range objects {
						var v any
						_ = json.Unmarshal(object, &v)
						got[resource][key] = v
					}
				}
				if !reflect.DeepEqual(got, want) {
					failures = append(failures, what+": state")
				}
				skipped := expected.Skipped[cluster]
				if skipped == nil {
					skipped = map[string]int{}
				}
				if !reflect.DeepEqual(c.Skipped, skipped) {
					failures = append(failures, fmt.Sprintf("%s: skipped %v", what, c.Skipped))
				}
				// The first stream's markers are the ones counted (each Kafka copy once).
				if v, ok := expected.Verification[cluster]; ok && (c.Mismatched != v.Mismatched || i == 0 && c.Verified != v.Verified || i > 0 && c.Verified == 0) {
					failures = append(failures, fmt.Sprintf("%s: verified %d, mismatched %d", what, c.Verified, c.Mismatched))
				}
				checked++
			}
		}
	}
	out, _ := json.Marshal(map[string]any{"checked": checked, "failures": failures, "contract": consumer.ContractVersion})
	fmt.Println(string(out))
}
