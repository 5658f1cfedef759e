package main

// The TCP load balancer: every new connection goes to the current target; a cut closes
// every open connection (clients reconnect, and land on the current target).

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
)

type balancer struct {
	servers map[string]string
	mu      sync.Mutex
	target  string
	conns   map[net.Conn]struct{}
}

func newBalancer(servers map[string]string, target string) *balancer {
	return &balancer{servers: servers, target: target, conns: map[net.Conn]struct{}{}}
}

func (b *balancer) serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go b.relay(c)
	}
}

func (b *balancer) relay(client net.Conn) {
	b.mu.Lock()
	addr := b.servers[b.target]
	b.mu.Unlock()
	server, err := net.Dial("tcp", addr)
	if err != nil {
		log.Printf("dial %s: %v", addr, err)
		client.Close()
		return
	}
	b.track(client, server)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		// Either side ending ends both: a half-open relay would hide a cut from the client.
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
	b.untrack(client, server)
}

func (b *balancer) track(cs ...net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range cs {
		b.conns[c] = struct{}{}
	}
}

func (b *balancer) untrack(cs ...net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range cs {
		delete(b.conns, c)
	}
}

func (b *balancer) routes() *http.ServeMux {
	mux := http.NewServeMux()
	// POST /target?to=a|b: where new connections go.
	mux.HandleFunc("/target", func(w http.ResponseWriter, r *http.Request) {
		to := r.URL.Query().Get("to")
		if _, ok := b.servers[to]; !ok {
			http.Error(w, "to must be a or b", http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		b.target = to
		b.mu.Unlock()
		log.Printf("new connections go to %s (%s)", to, b.servers[to])
		fmt.Fprintln(w, to)
	})
	// POST /cut: close every open connection.
	mux.HandleFunc("/cut", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		n := len(b.conns) / 2
		for c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		log.Printf("cut %d connections", n)
		fmt.Fprintln(w, n)
	})
	mux.HandleFunc("/state", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		defer b.mu.Unlock()
		fmt.Fprintf(w, "target=%s connections=%d\n", b.target, len(b.conns)/2)
	})
	return mux
}
