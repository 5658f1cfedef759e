package consumer

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
)

// heap is the bytes the heap holds once collected.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestTheWindowRemembersTheLatestIdsInBoundedMemory: after a million ids, the latest
// 100,000 are remembered, the first is not, and no more than 200,000 are held.
func TestTheWindowRemembersTheLatestIdsInBoundedMemory(t *testing.T) {
	before := heap()
	w := newWindow(DefaultRepeatWindow)
	const n = 1_000_000
	for i := range n {
		w.add(seenID{0, fmt.Sprintf("%032x", i)})
	}
	for i := n - DefaultRepeatWindow; i < n; i++ {
		if !w.has(seenID{0, fmt.Sprintf("%032x", i)}) {
			t.Fatalf("id %d of the latest %d forgotten", i, DefaultRepeatWindow)
		}
	}
	if w.has(seenID{0, fmt.Sprintf("%032x", 0)}) || w.has(seenID{1, fmt.Sprintf("%032x", n-1)}) {
		t.Fatal("the first id, or an id of another partition, remembered")
	}
	grown := heap() - before
	t.Logf("window of %d ids: %d held, heap grew %d MiB", DefaultRepeatWindow, w.len(), grown>>20)
	if w.len() > 2*DefaultRepeatWindow || grown > 64<<20 {
		t.Fatalf("%d ids held, heap grew %d bytes", w.len(), grown)
	}
	runtime.KeepAlive(w)
}

// update is a Kafka record of an update of ns/<key> on partition 0.
func update(id, key string, v int) ([]Header, []byte) {
	headers := []Header{}
	for _, h := range [][2]string{{"ce_id", id}, {"ce_type", "dev.deltaship.object.updated"}, {"ce_subject", "ns/" + key}, {"ce_apiversion", "v1"}, {"ce_kind", "ConfigMap"}, {"ce_cluster", "c1"}, {"content-type", "application/json"}} {
		headers = append(headers, Header{Key: h[0], Value: []byte(h[1])})
	}
	return headers, []byte(`{"metadata":{"name":"` + key + `","namespace":"ns"},"data":{"v":"` + strconv.Itoa(v) + `"}}`)
}

// TestUpdatesOfAFewKeysKeepMemoryFlatAndLateRepeatsOfHeldObjectsSkipped: a consumer given
// three windows' worth of updates of four keys holds no more than its window of ids,
// and a repeat of an object's last event, far beyond the window, is still skipped.
func TestUpdatesOfAFewKeysKeepMemoryFlatAndLateRepeatsOfHeldObjectsSkipped(t *testing.T) {
	const size = 10_000
	c := New(Options{Cluster: "c1", RepeatWindow: size})
	quiet, quietValue := update("quiet-1", "quiet", 1)
	if err := c.KafkaRecord(0, nil, quiet, quietValue); err != nil {
		t.Fatal(err)
	}
	before := heap()
	const n = 3 * size
	for i := range n {
		h, v := update(strconv.Itoa(i), "k"+strconv.Itoa(i%4), i)
		if err := c.KafkaRecord(0, nil, h, v); err != nil {
			t.Fatal(err)
		}
		if i == n/2 {
			t.Logf("heap after %d updates: %d MiB over the start", i, (heap()-before)>>20)
		}
	}
	grown := heap() - before
	t.Logf("heap after %d updates: %d MiB over the start; %d ids in the window", n, grown>>20, c.window.len())
	if c.window.len() > 2*size || grown > 16<<20 {
		t.Fatalf("%d ids held, heap grew %d bytes", c.window.len(), grown)
	}
	if err := c.KafkaRecord(0, nil, quiet, quietValue); err != nil || c.Duplicates != 1 {
		t.Fatalf("a repeat of quiet's last event after %d others: %v, %d duplicates", n, err, c.Duplicates)
	}
	if len(c.State()["v1/ConfigMap"]) != 5 {
		t.Fatalf("state: %v", c.State())
	}
}

// TestARepeatOfAMarkerIsSkippedAsLongAsItIsItsScopesLast: with a window of one id, a
// marker's repeat after an object event is still skipped; its copy on another partition is
// not a repeat.
func TestARepeatOfAMarkerIsSkippedAsLongAsItIsItsScopesLast(t *testing.T) {
	c := New(Options{Cluster: "c1", RepeatWindow: 1})
	marker, data := syncMarker("m1", "started", "s1")
	h, v := update("a1", "a", 1)
	for _, step := range []func() error{
		func() error { return c.KafkaRecord(0, nil, marker, data) },
		func() error { return c.KafkaRecord(0, nil, h, v) },
		func() error { return c.KafkaRecord(0, nil, marker, data) },
		func() error { return c.KafkaRecord(1, nil, marker, data) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if c.Duplicates != 1 {
		t.Fatalf("%d duplicates, want the one repeat on partition 0", c.Duplicates)
	}
}
