// ce-receiver: an HTTP receiver of CloudEvents built on the official CloudEvents Go SDK,
// for the HTTP sink's tests. It decodes every request with the SDK (binary or structured
// mode), validates the event, and appends what it got to a file as JSON lines; it can be
// told to fail, so the tests can prove the sink's guarantees through trouble.
//
//	ce-receiver -listen 127.0.0.1:PORT -out FILE [-token TOKEN | -basic USER:PASSWORD] [-tls-cert F -tls-key F [-client-ca F]]
//
// Lines of FILE, in the order requests were answered:
//
//	{"kind":"attempt","at":UNIX_NANOS,"id":"<ce-id or empty>","answer":"200|500|429|413|400|401|reset|slow"}
//
// ("slow" when a slow answer starts; its "200" follows once it is given.)
//	{"kind":"event","mode":"binary|structured","event":{...the event as the SDK writes it...}}
//
// POST /_control {"mode":"ok|status|slow|reset","status":500,"count":N,"retry_after":"2","delay_ms":0}
// sets what the next N requests get (count -1: until told otherwise); GET /_healthz is 200.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

type fault struct {
	Mode       string `json:"mode"`
	Status     int    `json:"status"`
	Count      int    `json:"count"`
	RetryAfter string `json:"retry_after"`
	DelayMs    int    `json:"delay_ms"`
}

type receiver struct {
	mu    sync.Mutex
	fault fault
	out   *os.File
	token string
	basic string
}

func (r *receiver) write(line map[string]any) {
	b, err := json.Marshal(line)
	if err != nil {
		log.Fatalf("cannot encode a line: %v", err)
	}
	if _, err := r.out.Write(append(b, '\n')); err != nil {
		log.Fatalf("cannot write %s: %v", r.out.Name(), err)
	}
}

// next takes the fault the current request gets.
func (r *receiver) next() fault {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.fault
	if f.Mode == "" || f.Mode == "ok" {
		return fault{Mode: "ok"}
	}
	if r.fault.Count > 0 {
		r.fault.Count--
		if r.fault.Count == 0 {
			r.fault = fault{Mode: "ok"}
		}
	}
	return f
}

func (r *receiver) attempt(req *http.Request, answer string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.write(map[string]any{"kind": "attempt", "at": time.Now().UnixNano(), "id": req.Header.Get("ce-id"), "answer": answer})
}

func (r *receiver) control(w http.ResponseWriter, req *http.Request) {
	var f fault
	if err := json.NewDecoder(req.Body).Decode(&f); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.fault = f
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch req.URL.Path {
	case "/_control":
		r.control(w, req)
		return
	case "/_healthz":
		w.WriteHeader(http.StatusOK)
		return
	}
	if r.token != "" && req.Header.Get("Authorization") != "Bearer "+r.token {
		r.attempt(req, "401")
		http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
		return
	}
	if user, password, ok := req.BasicAuth(); r.basic != "" && (!ok || user+":"+password != r.basic) {
		r.attempt(req, "401")
		http.Error(w, "missing or wrong basic credentials", http.StatusUnauthorized)
		return
	}
	f := r.next()
	switch f.Mode {
	case "status":
		r.attempt(req, fmt.Sprint(f.Status))
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		http.Error(w, "told to fail", f.Status)
		return
	case "reset":
		r.attempt(req, "reset")
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	case "slow":
		r.attempt(req, "slow")
		time.Sleep(time.Duration(f.DelayMs) * time.Millisecond)
	}
	event, err := cehttp.NewEventFromHTTPRequest(req)
	if err == nil {
		err = event.Validate()
	}
	if err != nil {
		r.attempt(req, "400")
		http.Error(w, "not a valid CloudEvent: "+err.Error(), http.StatusBadRequest)
		return
	}
	mode := "binary"
	if strings.HasPrefix(req.Header.Get("Content-Type"), "application/cloudevents+json") {
		mode = "structured"
	}
	r.mu.Lock()
	r.write(map[string]any{"kind": "attempt", "at": time.Now().UnixNano(), "id": event.ID(), "answer": "200"})
	r.write(map[string]any{"kind": "event", "mode": mode, "event": event})
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	outPath := flag.String("out", "", "file to append received events to")
	token := flag.String("token", "", "require this bearer token")
	basic := flag.String("basic", "", "require these basic credentials, USER:PASSWORD")
	cert := flag.String("tls-cert", "", "serve TLS with this certificate (PEM)")
	key := flag.String("tls-key", "", "the certificate's key (PEM)")
	clientCA := flag.String("client-ca", "", "require client certificates of this CA (PEM)")
	flag.Parse()
	if *outPath == "" {
		log.Fatal("-out is required")
	}
	out, err := os.OpenFile(*outPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	r := &receiver{out: out, token: *token, basic: *basic, fault: fault{Mode: "ok"}}
	server := &http.Server{Addr: *listen, Handler: r, ReadHeaderTimeout: 10 * time.Second}
	if *clientCA != "" {
		pem, err := os.ReadFile(*clientCA)
		if err != nil {
			log.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		server.TLSConfig = &tls.Config{ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	}
	log.Printf("ce-receiver listening on %s, writing %s", *listen, *outPath)
	if *cert != "" {
		err = server.ListenAndServeTLS(*cert, *key)
	} else {
		err = server.ListenAndServe()
	}
	if err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
