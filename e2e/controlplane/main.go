// Command controlplane is one binary for the local Slipway test cluster: it
// dispatches on the name it was started as (a symlink) to etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler or kubectl, built from the
// upstream Go modules. Each component runs as its own process because they
// share global flag and feature-gate state.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	name := filepath.Base(os.Args[0])
	if name == "controlplane" && len(os.Args) > 1 {
		// "controlplane kube-apiserver --flags..." works too.
		name = os.Args[1]
		os.Args = os.Args[1:]
	}
	switch name {
	case "etcd":
		etcdmain.Main(os.Args)
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "metrics-adapter":
		os.Exit(runMetricsAdapter())
	case "kubectl":
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	default:
		fmt.Fprintf(os.Stderr, "controlplane: unknown component %q (want etcd, kube-apiserver, kube-controller-manager, kube-scheduler, metrics-adapter or kubectl)\n", name)
		os.Exit(2)
	}
}
