// deployment-trigger runs a function whenever a Deployment's pod template changes (a new
// image, new env, new resources), never on status updates or scaling: it reads a Kafka
// topic or a JetStream stream of Deployments to its end and reports each template change.
//
//	go run ./examples/deployment-trigger -kafka kafka:9092 -topic deltaship.prod.apps.deployments
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"deltaship.dev/consumer/v2"
	"deltaship.dev/consumer/v2/jetstream"
	"deltaship.dev/consumer/v2/kafka"
)

// trigger keeps each Deployment's last pod template and calls run when it changes.
type trigger struct {
	consumer.NopListener
	templates map[string]json.RawMessage
	run       func(key string, images []string)
}

func (t *trigger) Upsert(resource, key string, object json.RawMessage) {
	if !strings.HasSuffix(resource, "/Deployment") {
		return
	}
	var d struct {
		Spec struct {
			Template json.RawMessage `json:"template"`
		} `json:"spec"`
	}
	if json.Unmarshal(object, &d) != nil {
		return
	}
	before, seen := t.templates[key]
	t.templates[key] = d.Spec.Template
	if seen && !bytes.Equal(before, d.Spec.Template) {
		t.run(key, images(d.Spec.Template))
	}
}

func (t *trigger) Delete(_, key string) { delete(t.templates, key) }

func images(template json.RawMessage) []string {
	var pod struct {
		Spec struct {
			Containers []struct {
				Image string `json:"image"`
			} `json:"containers"`
		} `json:"spec"`
	}
	_ = json.Unmarshal(template, &pod)
	var out []string
	for _, c := range pod.Spec.Containers {
		out = append(out, c.Image)
	}
	return out
}

func main() {
	brokers := flag.String("kafka", "", "Kafka bootstrap servers")
	topic := flag.String("topic", "", "the Deployments' topic")
	natsURL := flag.String("nats", "", "NATS server URL")
	stream := flag.String("stream", "", "the JetStream stream")
	flag.Parse()
	t := &trigger{templates: map[string]json.RawMessage{}, run: func(key string, images []string) {
		fmt.Printf("pod template of %s changed: images %v\n", key, images)
	}}
	c := consumer.New(consumer.Options{Listener: t})
	var err error
	if *brokers != "" {
		err = kafka.Read(strings.Split(*brokers, ","), []string{*topic}, c, nil)
	} else {
		err = jetstream.Read(context.Background(), *natsURL, *stream, c, nil)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
