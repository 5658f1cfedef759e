package consumer

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"testing"

	cenats "github.com/cloudevents/sdk-go/protocol/nats/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/nats-io/nats.go"
)

// TestTheGoSDKsNatsBindingReadsStructuredOnly records what the SDK's own NATS binding
// (protocol/nats, v2.16.2) makes of deltaship's messages: it reads every message as
// structured, so a binary-mode message (the default: attributes as ce- headers) is not an
// event to it, and a structured one is. This library reads both (TestVectors).
func TestTheGoSDKsNatsBindingReadsStructuredOnly(t *testing.T) {
	f, err := os.Open("../../vectors/initial-and-live/nats.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 1<<20), 16<<20)
	if !lines.Scan() {
		t.Fatal("no message")
	}
	var r recorded
	if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	binary := &nats.Msg{Subject: "s", Header: nats.Header{}, Data: []byte(r.Data)}
	for _, h := range r.Headers {
		binary.Header.Add(h[0], h[1])
	}
	if _, err := binding.ToEvent(context.Background(), cenats.NewMessage(binary)); err == nil {
		t.Fatal("the SDK's NATS binding read a binary-mode message; update the README's interop notes")
	}
	c := New(Options{})
	var headers []Header
	for _, h := range r.Headers {
		headers = append(headers, Header{Key: h[0], Value: []byte(h[1])})
	}
	if err := c.NatsMessage(headers, []byte(r.Data)); err != nil {
		t.Fatalf("this library reads it: %v", err)
	}
	structured, err := json.Marshal(map[string]any{"specversion": "1.0", "id": "1", "type": "dev.deltaship.sync.started", "source": "//c/api/v1/configmaps", "data": map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := binding.ToEvent(context.Background(), cenats.NewMessage(&nats.Msg{Subject: "s", Data: structured}))
	if err != nil || e.ID() != "1" {
		t.Fatalf("the SDK's NATS binding on a structured message: %v %v", e, err)
	}
}
