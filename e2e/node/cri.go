package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	criclient "k8s.io/cri-client/pkg"
)

// removeAllPods stops and removes every pod sandbox of the container runtime at endpoint, as a
// kubelet does when it tears a pod down: the runtime deletes each pod's containers, its network
// (CNI DEL: the bridge port, the address, the masquerade chain) and its network namespace.
// Usage: node remove-all-pods unix:///path/to/containerd.sock
func removeAllPods(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: node remove-all-pods ENDPOINT")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runtime, err := criclient.NewRemoteRuntimeService(args[0], 10*time.Second, noop.NewTracerProvider(), nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "remove-all-pods: connecting to %s: %v\n", args[0], err)
		return 1
	}
	pods, err := runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "remove-all-pods: listing the pods of %s: %v\n", args[0], err)
		return 1
	}
	failed := 0
	for _, pod := range pods {
		name := pod.GetMetadata().GetNamespace() + "/" + pod.GetMetadata().GetName()
		if err := runtime.StopPodSandbox(ctx, pod.GetId()); err != nil {
			fmt.Fprintf(os.Stderr, "remove-all-pods: stopping %s: %v\n", name, err)
			failed++
			continue
		}
		if err := runtime.RemovePodSandbox(ctx, pod.GetId()); err != nil {
			fmt.Fprintf(os.Stderr, "remove-all-pods: removing %s: %v\n", name, err)
			failed++
			continue
		}
		fmt.Printf("removed pod %s (%s)\n", name, pod.GetId())
	}
	if failed > 0 {
		return 1
	}
	return 0
}
