package main

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestOnlyTemplateChangesRunTheFunction(t *testing.T) {
	var ran [][]string
	tr := &trigger{templates: map[string]json.RawMessage{}, run: func(_ string, images []string) { ran = append(ran, images) }}
	deploy := func(image string, replicas, ready int) json.RawMessage {
		return json.RawMessage(`{"spec":{"replicas":` + itoa(replicas) + `,"template":{"spec":{"containers":[{"name":"web","image":"` + image + `"}]}}},"status":{"readyReplicas":` + itoa(ready) + `}}`)
	}
	tr.Upsert("apps/v1/Deployment", "shop/web", deploy("web:1", 1, 0))
	tr.Upsert("apps/v1/Deployment", "shop/web", deploy("web:1", 1, 1)) // status
	tr.Upsert("apps/v1/Deployment", "shop/web", deploy("web:1", 3, 1)) // scaling
	tr.Upsert("apps/v1/Deployment", "shop/web", deploy("web:2", 3, 1)) // a new image
	tr.Upsert("v1/ConfigMap", "shop/web", json.RawMessage(`{}`))
	if !reflect.DeepEqual(ran, [][]string{{"web:2"}}) {
		t.Fatalf("ran %v", ran)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
