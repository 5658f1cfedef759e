// The client-go side of benches/live.rs: a SharedInformerFactory informer on the ConfigMaps
// of one namespace that sends every add, update and delete to a Kafka topic as one JSON
// record (key namespace/name), acknowledged by the broker (acks=all), as a client-go program
// doing deltaship's job would. The producer has deltaship's Kafka sink settings (idempotent,
// acks=all, lz4, linger 5 ms) so that both send the same way.
//
// It prints "synced <n>" on stdout once the initial list is in the informer's cache and every
// record of it is acknowledged, and stops on SIGTERM or SIGINT after flushing.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// record is what one change ships: its type, the object's key and the object.
type record struct {
	Type   string            `json:"type"`
	Key    string            `json:"key"`
	Object *corev1.ConfigMap `json:"object"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (or -server and -token)")
	server := flag.String("server", "", "API server URL, when no -kubeconfig")
	token := flag.String("token", "", "bearer token for -server")
	caFile := flag.String("ca-file", "", "CA bundle for -server (default: the system's)")
	brokers := flag.String("brokers", "", "Kafka bootstrap brokers, comma separated")
	topic := flag.String("topic", "", "Kafka topic to send the records to")
	namespace := flag.String("namespace", "", "namespace whose ConfigMaps are watched")
	flag.Parse()
	if *brokers == "" || *topic == "" || *namespace == "" || (*kubeconfig == "" && *server == "") {
		fail("-brokers, -topic, -namespace and one of -kubeconfig or -server are required")
	}

	var config *rest.Config
	var err error
	if *kubeconfig != "" {
		config, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			fail("-kubeconfig %s: %v", *kubeconfig, err)
		}
	} else {
		config = &rest.Config{Host: *server, BearerToken: *token, TLSClientConfig: rest.TLSClientConfig{CAFile: *caFile}}
	}
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail("kube client: %v", err)
	}

	producer, err := kgo.NewClient(
		kgo.SeedBrokers(splitComma(*brokers)...),
		kgo.DefaultProduceTopic(*topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()),
		kgo.ProducerLinger(5*time.Millisecond),
	)
	if err != nil {
		fail("kafka client: %v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var failed atomic.Int64
	send := func(kind string, cm *corev1.ConfigMap) {
		key := cm.Namespace + "/" + cm.Name
		value, err := json.Marshal(record{Type: kind, Key: key, Object: cm})
		if err != nil {
			fail("encoding %s: %v", key, err)
		}
		producer.Produce(context.Background(), &kgo.Record{Key: []byte(key), Value: value}, func(_ *kgo.Record, err error) {
			if err != nil && failed.Add(1) == 1 {
				fmt.Fprintf(os.Stderr, "informer: a record was not acknowledged: %v\n", err)
			}
		})
	}

	factory := informers.NewSharedInformerFactoryWithOptions(clientset, 0, informers.WithNamespace(*namespace))
	informer := factory.Core().V1().ConfigMaps().Informer()
	_, err = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { send("added", obj.(*corev1.ConfigMap)) },
		UpdateFunc: func(_, obj any) {
			send("updated", obj.(*corev1.ConfigMap))
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if cm, ok := obj.(*corev1.ConfigMap); ok {
				send("deleted", cm)
			}
		},
	})
	if err != nil {
		fail("event handler: %v", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		fail("the initial list did not complete")
	}
	// HasSynced is true once the initial list has been delivered to the handlers, so every
	// record of it has been produced; Flush waits for their acknowledgements.
	if err := producer.Flush(ctx); err != nil {
		fail("flushing the initial sync: %v", err)
	}
	if n := failed.Load(); n > 0 {
		fail("%d records of the initial sync were not acknowledged", n)
	}
	fmt.Printf("synced %d\n", len(informer.GetStore().ListKeys()))

	<-ctx.Done()
	factory.Shutdown()
	flushCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := producer.Flush(flushCtx); err != nil {
		fmt.Fprintf(os.Stderr, "informer: flushing at shutdown: %v\n", err)
	}
	producer.Close()
	if n := failed.Load(); n > 0 {
		fail("%d records were not acknowledged", n)
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "informer: "+format+"\n", args...)
	os.Exit(2)
}
