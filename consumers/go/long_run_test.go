package consumer

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// syncMarker is a Kafka record of a full sync's started or completed marker of ConfigMaps in
// every namespace, of cluster c1.
func syncMarker(id, phase, syncID string) ([]Header, []byte) {
	headers := []Header{}
	for _, h := range [][2]string{{"ce_id", id}, {"ce_type", "dev.deltaship.sync." + phase}, {"ce_apiversion", "v1"}, {"ce_kind", "ConfigMap"}, {"ce_cluster", "c1"}, {"content-type", "application/json"}} {
		headers = append(headers, Header{Key: h[0], Value: []byte(h[1])})
	}
	return headers, []byte(`{"syncId": "` + syncID + `", "mode": "full", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}`)
}

// TestMillionsOfEventsKeepMemoryFlat feeds 2,000,000 records through KafkaRecord, in blocks
// of ten: eight new events (updates of four ConfigMaps, and in every hundredth block a full
// sync's markers around them) and two exact repeats of the latest ones, close behind. The
// heap once collected after the first quarter and at the end differs by less than 1 MiB,
// with the default repeat window at the same fill both times (800,000 new ids apart);
// every repeat is skipped and the state is the last update of each ConfigMap. Measured: 16.2
// MiB both times (+1 KiB), 15 s; with a window that never drops an id (every id kept, as
// before the window) the heap grows from 32 to 129 MiB and the test fails.
func TestMillionsOfEventsKeepMemoryFlat(t *testing.T) {
	const blocks, quarter = 200_000, 50_000
	began := time.Now()
	c := New(Options{Cluster: "c1"})
	type record struct {
		headers []Header
		value   []byte
	}
	var atQuarter uint64
	var windowAtQuarter int
	for b := range blocks {
		id := func(i int) string { return fmt.Sprintf("%08x%024x", b, i) }
		up := func(i, key int) record {
			h, v := update(id(i), fmt.Sprintf("k%d", key), 8*b+i)
			return record{h, v}
		}
		var block []record
		if b%100 == 0 {
			sync := fmt.Sprintf("sync-%d", b)
			var started, completed record
			started.headers, started.value = syncMarker(id(0), "started", sync)
			completed.headers, completed.value = syncMarker(id(5), "completed", sync)
			block = []record{started, up(1, 0), up(2, 1), up(3, 2), up(4, 3), completed, completed, up(6, 0), up(7, 1)}
			block = append(block, block[8])
		} else {
			block = []record{up(0, 0), up(1, 1), up(2, 2), up(3, 3), up(4, 0), up(5, 1), up(6, 2), up(7, 3)}
			block = append(block, block[6], block[7])
		}
		for _, r := range block {
			if err := c.KafkaRecord(0, nil, r.headers, r.value); err != nil {
				t.Fatal(err)
			}
		}
		if b+1 == quarter {
			atQuarter, windowAtQuarter = heap(), c.window.len()
		}
	}
	atEnd := heap()
	grown := int64(atEnd) - int64(atQuarter)
	t.Logf("%d events in %.1f s: heap %.1f MiB after the first quarter, %.1f MiB at the end (%+d KiB); %d ids in the window at both",
		10*blocks, time.Since(began).Seconds(), float64(atQuarter)/(1<<20), float64(atEnd)/(1<<20), grown>>10, c.window.len())
	if c.window.len() != windowAtQuarter {
		t.Fatalf("the window held %d ids after the first quarter, %d at the end", windowAtQuarter, c.window.len())
	}
	if grown > 1<<20 {
		t.Fatalf("the heap grew %d bytes from the first quarter to the end", grown)
	}
	if c.Duplicates != 2*blocks || len(c.Skipped) != 0 {
		t.Fatalf("%d duplicates (want %d), skipped %v", c.Duplicates, 2*blocks, c.Skipped)
	}
	objects := c.State()["v1/ConfigMap"]
	last := 8 * (blocks - 1)
	for key, v := range []int{last + 4, last + 5, last + 6, last + 7} {
		got, want := string(objects[fmt.Sprintf("ns/k%d", key)]), fmt.Sprintf(`"v":"%d"`, v)
		if len(objects) != 4 || !strings.Contains(got, want) {
			t.Fatalf("ns/k%d is %s, want its last update (%s); %d objects held", key, got, want, len(objects))
		}
	}
	runtime.KeepAlive(c)
}
