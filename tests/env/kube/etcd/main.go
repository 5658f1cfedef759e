// Command etcd is the stock etcd server, built from the go.etcd.io/etcd/server/v3 module at the
// version k8s.io/kubernetes requires, so the test environment needs no prebuilt etcd download.
// tests/env/kube/ctl build copies this file into its wrapper module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
