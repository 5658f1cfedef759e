// Command ha-proxy is the steerable network of the test environment's HA control plane
// (tests/env/ha/ctl starts two of it): `lb`, a TCP load balancer in front of the two API
// servers, and `etcd-lag`, a gRPC proxy between the second API server and etcd that can hold
// that server's watch streams (its watch cache lags) or cut it off (a partition). Each is
// steered over a small HTTP control port, so tests change it with one request.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ha-proxy lb|etcd-lag [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve")
	control := fs.String("control", "127.0.0.1:0", "address of the HTTP control port")
	var mux *http.ServeMux
	var serve func(net.Listener) error
	switch os.Args[1] {
	case "lb":
		a := fs.String("a", "", "address of server A (new connections go there at start)")
		b := fs.String("b", "", "address of server B")
		fs.Parse(os.Args[2:])
		lb := newBalancer(map[string]string{"a": *a, "b": *b}, "a")
		mux, serve = lb.routes(), lb.serve
	case "etcd-lag":
		upstream := fs.String("upstream", "", "etcd's client address (host:port, plaintext gRPC)")
		fs.Parse(os.Args[2:])
		p, err := newLagProxy(*upstream)
		if err != nil {
			log.Fatalf("etcd-lag: %v", err)
		}
		mux, serve = p.routes(), p.serve
	default:
		fmt.Fprintf(os.Stderr, "unknown role %q; use lb or etcd-lag\n", os.Args[1])
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("listen %s: %v", *listen, err)
	}
	cln, err := net.Listen("tcp", *control)
	if err != nil {
		log.Fatalf("listen %s: %v", *control, err)
	}
	go func() { log.Fatal(http.Serve(cln, mux)) }()
	log.Printf("%s serving %s, control on %s", os.Args[1], ln.Addr(), cln.Addr())
	log.Fatal(serve(ln))
}
