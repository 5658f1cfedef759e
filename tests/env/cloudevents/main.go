// ce-validate reads CloudEvents in the structured JSON format, one per line, from standard
// input, and checks each with the official CloudEvents Go SDK. It prints the type of every
// valid event and exits 1 at the first invalid one, naming the problem.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/cloudevents/sdk-go/v2/event"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)
	n := 0
	for in.Scan() {
		n++
		var e event.Event
		if err := json.Unmarshal(in.Bytes(), &e); err != nil {
			fmt.Fprintf(os.Stderr, "line %d: not a CloudEvent: %v\n", n, err)
			os.Exit(1)
		}
		if err := e.Validate(); err != nil {
			fmt.Fprintf(os.Stderr, "line %d: invalid CloudEvent: %v\n", n, err)
			os.Exit(1)
		}
		fmt.Printf("valid %s %s\n", e.Type(), e.Subject())
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "reading: %v\n", err)
		os.Exit(1)
	}
}
