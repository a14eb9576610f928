// Command node is the real node of the local Slipway test cluster in one binary: it dispatches on
// the name it was started as (a symlink) to the kubelet or kube-proxy, built from the same
// k8s.io/kubernetes module and go.mod as the control plane (e2e/controlplane). Each runs as its
// own process: they share global flag and feature-gate state. remove-all-pods tears down every pod
// of a container runtime through its CRI socket (cri.go), for stopping the node cleanly.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metric registration
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric registration
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	name := filepath.Base(os.Args[0])
	if name == "node" && len(os.Args) > 1 {
		// "node kubelet --flags..." works too.
		name = os.Args[1]
		os.Args = os.Args[1:]
	}
	switch name {
	case "kubelet":
		os.Exit(cli.Run(kubelet.NewKubeletCommand(context.Background())))
	case "kube-proxy":
		os.Exit(cli.Run(proxy.NewProxyCommand()))
	case "remove-all-pods":
		os.Exit(removeAllPods(os.Args[1:]))
	default:
		fmt.Fprintf(os.Stderr, "node: unknown component %q (want kubelet, kube-proxy or remove-all-pods)\n", name)
		os.Exit(2)
	}
}
