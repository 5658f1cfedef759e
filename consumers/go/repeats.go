package consumer

// DefaultRepeatWindow is how many of the latest event ids a Consumer remembers beyond the
// last id of each object and marker scope it holds (Options.RepeatWindow): the most events
// deltaship keeps unacknowledged on a route (delivery.max_in_flight at its maximum). A
// repeat on Kafka (a route without transactions, through a broker restart) is a re-send of
// one of those, so fewer come between it and its original.
const DefaultRepeatWindow = 100_000

// seenID is an event id on its partition (a Kafka marker has one id on every partition).
type seenID struct {
	partition int32
	id        string
}

// window remembers the latest event ids in two generations of at most size ids each:
// when the current one is full it becomes the previous one and the oldest is dropped, so
// the latest size ids are always remembered and never more than 2 × size.
type window struct {
	size              int
	current, previous map[seenID]struct{}
}

func newWindow(size int) *window {
	return &window{size: size, current: map[seenID]struct{}{}, previous: map[seenID]struct{}{}}
}

func (w *window) has(id seenID) bool {
	_, now := w.current[id]
	_, before := w.previous[id]
	return now || before
}

func (w *window) add(id seenID) {
	if len(w.current) >= w.size {
		w.previous, w.current = w.current, make(map[seenID]struct{}, w.size)
	}
	w.current[id] = struct{}{}
}

func (w *window) len() int { return len(w.current) + len(w.previous) }

// markerScope is where a marker's repeats can come: the marker key deltaship sends it
// under (resource, namespace scope, mode, phase), on one partition, of one cluster.
type markerScope struct {
	partition         int32
	cluster, resource string
	namespace         string
	allNamespaces     bool
	full, started     bool
}

func scopeOf(m *marker, cluster string, partition int32) markerScope {
	s := markerScope{partition: partition, cluster: cluster, resource: m.resource, allNamespaces: m.namespace == nil, full: m.full, started: m.started}
	if m.namespace != nil {
		s.namespace = *m.namespace
	}
	return s
}

// repeated tells whether r repeats an event already applied: the event contract's repeat
// is exact and never arrives after a newer event of the same key, so it is the last event
// of its object (or of its marker scope) when the consumer still holds that, and else one
// of the latest ids.
func (c *Consumer) repeated(r *received) bool {
	if c.window.has(seenID{r.partition, r.id}) {
		return true
	}
	if r.marker != nil {
		return c.markers[scopeOf(r.marker, r.cluster, r.partition)] == r.id
	}
	p, held := c.homes[slot{r.object.resource, r.object.key}]
	return held && p.home == (home{r.partition, r.cluster}) && p.id == r.id
}

// remember records r as the latest event of its partition, and of its marker scope.
func (c *Consumer) remember(r *received) {
	c.window.add(seenID{r.partition, r.id})
	if r.marker != nil {
		c.markers[scopeOf(r.marker, r.cluster, r.partition)] = r.id
	}
}
