package main

// The etcd proxy of the lagging API server: every gRPC call is relayed to etcd as opaque
// messages, except that while "lag" is on the messages etcd sends on Watch streams
// (/etcdserverpb.Watch/Watch: events, progress notifications, created/cancelled answers)
// are held back in order and released when it goes off. The API server's watch cache is
// fed only by those streams, so it stays where it was, while its reads of etcd (Range,
// including the current revision a consistent read waits for) get fresh answers: what a
// real API server whose watch has fallen behind sees. A partition ends every call and
// refuses new ones until healed.

import (
	"context"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const watchMethod = "/etcdserverpb.Watch/Watch"

// rawCodec passes messages through as the bytes they are on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}

type lagProxy struct {
	upstream *grpc.ClientConn
	mu       sync.Mutex
	changed  *sync.Cond // lag or partition changed, or a held stream got a message
	lag      bool
	cut      bool
	held     int // messages held right now, over every stream
	calls    map[*context.CancelFunc]struct{}
}

func newLagProxy(upstream string) (*lagProxy, error) {
	// No message size limit of its own (gRPC's default is 4 MB): the API server's lists of
	// etcd are pages of up to 10,000 objects, 12 MB of ConfigMaps once the benches' are in it.
	conn, err := grpc.NewClient(upstream, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)))
	if err != nil {
		return nil, err
	}
	p := &lagProxy{upstream: conn, calls: map[*context.CancelFunc]struct{}{}}
	p.changed = sync.NewCond(&p.mu)
	return p, nil
}

func (p *lagProxy) serve(ln net.Listener) error {
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(p.relay),
		grpc.MaxRecvMsgSize(math.MaxInt32), grpc.MaxSendMsgSize(math.MaxInt32))
	return srv.Serve(ln)
}

// outgoing: the caller's metadata (etcd's client sends e.g. hasleader on watches), without
// what gRPC sets itself.
func outgoing(ctx context.Context) context.Context {
	in, _ := metadata.FromIncomingContext(ctx)
	out := metadata.MD{}
	for k, v := range in {
		if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") || k == "content-type" || k == "user-agent" {
			continue
		}
		out[k] = v
	}
	return metadata.NewOutgoingContext(ctx, out)
}

func (p *lagProxy) relay(_ any, down grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(down)
	ctx, cancel := context.WithCancel(outgoing(down.Context()))
	defer cancel()
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		return status.Error(codes.Unavailable, "partitioned from etcd (tests/env/ha/ctl partition)")
	}
	p.calls[&cancel] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.calls, &cancel)
		p.mu.Unlock()
	}()

	up, err := p.upstream.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	// Caller to etcd, as it comes.
	go func() {
		for {
			var m []byte
			if err := down.RecvMsg(&m); err != nil {
				if err == io.EOF {
					up.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if err := up.SendMsg(&m); err != nil {
				return
			}
		}
	}()
	// etcd to the caller: through a queue, which a watch stream only drains while not lagging.
	hold := method == watchMethod
	var queue [][]byte
	var end error
	go func() {
		for {
			var m []byte
			err := up.RecvMsg(&m)
			p.mu.Lock()
			if err != nil {
				end = err
			} else {
				queue = append(queue, m)
				if hold {
					p.held++
				}
			}
			p.changed.Broadcast()
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.changed.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	for {
		p.mu.Lock()
		for ctx.Err() == nil && (len(queue) == 0 && end == nil || len(queue) > 0 && hold && p.lag) {
			p.changed.Wait()
		}
		if ctx.Err() != nil {
			p.held -= heldOf(hold, len(queue))
			p.mu.Unlock()
			return status.Error(codes.Unavailable, "cut off from etcd")
		}
		if len(queue) == 0 { // and so end != nil
			p.mu.Unlock()
			down.SetTrailer(up.Trailer())
			if end == io.EOF {
				return nil
			}
			return end
		}
		m := queue[0]
		queue = queue[1:]
		if hold {
			p.held--
		}
		p.mu.Unlock()
		if err := down.SendMsg(&m); err != nil {
			p.mu.Lock()
			p.held -= heldOf(hold, len(queue))
			p.mu.Unlock()
			return err
		}
	}
}

func heldOf(hold bool, n int) int {
	if hold {
		return n
	}
	return 0
}

func (p *lagProxy) routes() *http.ServeMux {
	mux := http.NewServeMux()
	set := func(name string, field *bool, onChange func()) {
		// POST /<name>?on=true|false
		mux.HandleFunc("/"+name, func(w http.ResponseWriter, r *http.Request) {
			on := r.URL.Query().Get("on")
			if on != "true" && on != "false" {
				http.Error(w, "on must be true or false", http.StatusBadRequest)
				return
			}
			p.mu.Lock()
			*field = on == "true"
			if onChange != nil {
				onChange()
			}
			p.changed.Broadcast()
			p.mu.Unlock()
			log.Printf("%s: %s", name, on)
			fmt.Fprintln(w, on)
		})
	}
	set("lag", &p.lag, nil)
	set("partition", &p.cut, func() {
		if p.cut {
			for c := range p.calls {
				(*c)()
			}
		}
	})
	mux.HandleFunc("/state", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		fmt.Fprintf(w, "lag=%t partition=%t calls=%d held=%d\n", p.lag, p.cut, len(p.calls), p.held)
	})
	return mux
}
