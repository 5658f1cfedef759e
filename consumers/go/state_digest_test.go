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
)

// verification is the expected outcome of the markers' count-and-digest checks of one
// cluster (vectors/README.md, "Files of a vector").
type verification struct {
	Verified   int `json:"verified"`
	Mismatched int `json:"mismatched"`
	Mismatches []struct {
		SyncID    string `json:"syncId"`
		Partition int32  `json:"partition"`
		Expected  struct {
			Count  uint64
			Digest string
		} `json:"expected"`
		Held struct {
			Count  uint64
			Digest string
		} `json:"held"`
	} `json:"mismatches"`
}

type stateDigestCase struct {
	Clusters     map[string]map[string]map[string]any `json:"clusters"`
	Skipped      map[string]map[string]int            `json:"skipped"`
	Verification map[string]verification              `json:"verification"`
}

func stateDigestCases(t *testing.T) map[string]stateDigestCase {
	paths, err := filepath.Glob("../../vectors/state-digest/*/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]stateDigestCase{}
	flagged := 0
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var c stateDigestCase
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		cases[filepath.Dir(p)] = c
		if c.Verification["c1"].Mismatched > 0 {
			flagged++
		}
	}
	if len(cases) < 7 || flagged < 5 {
		t.Fatalf("state-digest vectors: %d, %d tampered", len(cases), flagged)
	}
	return cases
}

func TestTerm(t *testing.T) {
	// printf 'ns/a\nu1\n7' | sha256sum
	if hi, lo := term("ns/a", "u1", "7"); fmt.Sprintf("%016x%016x", hi, lo) != "9003c859063459a282b3019b4296357b" {
		t.Fatalf("term %016x%016x", hi, lo)
	}
	f := figures{hi: 0, lo: ^uint64(0)}
	f.add(^uint64(0), 1)
	if f.digest() != "00000000000000000000000000000000" || f.count != 1 {
		t.Fatalf("the sum does not wrap at 2^128: %s", f.digest())
	}
}

// TestStateDigestVectors: every marker is checked, the clean streams verify without a
// mismatch and the tampered ones are flagged at exactly their expected markers.
func TestStateDigestVectors(t *testing.T) {
	for dir, expected := range stateDigestCases(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			for cluster, want := range expected.Clusters {
				var checks []Check
				report := &bytes.Buffer{}
				c := New(Options{Cluster: cluster, Report: report, OnCheck: func(k Check) { checks = append(checks, k) }})
				if err := ReadRecords(streamOf(dir), c, nil); err != nil {
					t.Fatal(err)
				}
				if got := rebuilt(t, c); !reflect.DeepEqual(got, want) {
					t.Errorf("cluster %s: state %v, want %v", cluster, got, want)
				}
				if !reflect.DeepEqual(c.Skipped, expected.Skipped[cluster]) {
					t.Errorf("cluster %s: skipped %v, want %v", cluster, c.Skipped, expected.Skipped[cluster])
				}
				v := expected.Verification[cluster]
				if c.Verified != v.Verified || c.Mismatched != v.Mismatched || len(checks) != v.Verified+v.Mismatched {
					t.Errorf("cluster %s: verified %d mismatched %d (%d checks), want %d %d", cluster, c.Verified, c.Mismatched, len(checks), v.Verified, v.Mismatched)
				}
				var bad []string
				for _, k := range checks {
					if !k.OK() {
						bad = append(bad, fmt.Sprintf("%s/%d %d %s %d %s", k.SyncID, k.Partition, k.ExpectedCount, k.ExpectedDigest, k.HeldCount, k.HeldDigest))
					}
				}
				var wantBad []string
				for _, m := range v.Mismatches {
					wantBad = append(wantBad, fmt.Sprintf("%s/%d %d %s %d %s", m.SyncID, m.Partition, m.Expected.Count, m.Expected.Digest, m.Held.Count, m.Held.Digest))
				}
				if !reflect.DeepEqual(bad, wantBad) {
					t.Errorf("cluster %s: mismatches %v, want %v", cluster, bad, wantBad)
				}
				if n := strings.Count(report.String(), "state mismatch at marker "); n != v.Mismatched {
					t.Errorf("cluster %s: %d mismatches reported: %s", cluster, n, report)
				}
			}
		})
	}
}

// TestVerifyExitCode: the command exits 3 under -verify when a marker mismatched, 0
// without it, and prints the summary line only under -verify.
func TestVerifyExitCode(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rebuild")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/deltaship-rebuild").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for dir, expected := range stateDigestCases(t) {
		v := expected.Verification["c1"]
		for _, verify := range []bool{false, true} {
			args := []string{"-records", streamOf(dir), "-cluster", "c1"}
			if verify {
				args = append(args, "-verify")
			}
			cmd := exec.Command(bin, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			if e, ok := err.(*exec.ExitError); ok {
				code = e.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			want := 0
			if verify && v.Mismatched > 0 {
				want = 3
			}
			summary := fmt.Sprintf("verification: {\"verified\": %d, \"mismatched\": %d}\n", v.Verified, v.Mismatched)
			if code != want || strings.Contains(stderr.String(), summary) != verify || strings.Count(stderr.String(), "state mismatch at marker ") != v.Mismatched {
				t.Errorf("%s -verify=%v: exit %d, want %d: %s", dir, verify, code, want, stderr.String())
			}
		}
	}
}
