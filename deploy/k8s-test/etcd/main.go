// etcd for the test control plane: etcd's own entry point, at the server release that
// k8s.io/kubernetes requires.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
