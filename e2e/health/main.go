// health: what Argo CD, kstatus (`helm --wait`, cli-utils) and Flux make of Slipway objects.
// It reads a JSON array of objects on stdin and writes one JSON object per input: the Argo CD
// health that a Lua health check gives (run in gopher-lua, the Lua VM Argo CD embeds, with the
// libraries Argo CD opens for the scripts of argocd-cm), kstatus' computed status, and, given a
// Flux Kustomization with healthCheckExprs, the status Flux's own CEL evaluator gives.
//
// With `actions` and an argocd-cm ConfigMap, it runs each object's Argo CD resource actions
// instead (actions.go): which actions discovery offers, and the patch each action makes.
//
// Usage: health LUA_FILE [FLUX_KUSTOMIZATION_YAML] < objects.json
//
//	health actions ARGOCD_CM_YAML < objects.json
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/fluxcd/pkg/apis/kustomize"
	fluxcel "github.com/fluxcd/pkg/runtime/cel"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

type result struct {
	ArgoCD  verdict  `json:"argocd"`
	KStatus verdict  `json:"kstatus"`
	Flux    *verdict `json:"flux,omitempty"`
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "actions" {
		check(runActions(os.Args[2], readObjects()))
		return
	}
	if len(os.Args) != 2 && len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: health LUA_FILE [FLUX_KUSTOMIZATION_YAML] < objects.json")
		fmt.Fprintln(os.Stderr, "       health actions ARGOCD_CM_YAML < objects.json")
		os.Exit(2)
	}
	script, err := os.ReadFile(os.Args[1])
	check(err)
	flux := map[string]*fluxcel.StatusEvaluator{}
	if len(os.Args) == 3 {
		flux, err = fluxEvaluators(os.Args[2])
		check(err)
	}
	objects := readObjects()
	out := make([]result, 0, len(objects))
	for _, obj := range objects {
		argo, err := argoHealth(string(script), obj)
		check(err)
		computed, err := status.Compute(&unstructured.Unstructured{Object: obj})
		check(err)
		r := result{ArgoCD: argo, KStatus: verdict{Status: computed.Status.String(), Message: computed.Message}}
		u := &unstructured.Unstructured{Object: obj}
		if evaluator, ok := flux[u.GetAPIVersion()+"/"+u.GetKind()]; ok {
			// Flux's status reader turns an evaluation error (a field the object has not got yet)
			// into Unknown, and waits on.
			if got, err := evaluator.Evaluate(context.Background(), u); err != nil {
				r.Flux = &verdict{Status: status.UnknownStatus.String(), Message: err.Error()}
			} else {
				r.Flux = &verdict{Status: got.Status.String(), Message: got.Message}
			}
		}
		out = append(out, r)
	}
	check(json.NewEncoder(os.Stdout).Encode(out))
}

// fluxEvaluators reads spec.healthCheckExprs of a Flux Kustomization: one evaluator per apiVersion/kind.
func fluxEvaluators(path string) (map[string]*fluxcel.StatusEvaluator, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Spec struct {
			HealthCheckExprs []kustomize.CustomHealthCheck `json:"healthCheckExprs"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	evaluators := map[string]*fluxcel.StatusEvaluator{}
	for i := range doc.Spec.HealthCheckExprs {
		check := doc.Spec.HealthCheckExprs[i]
		evaluator, err := fluxcel.NewStatusEvaluator(&check.HealthCheckExpressions)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", check.APIVersion, check.Kind, err)
		}
		evaluators[check.APIVersion+"/"+check.Kind] = evaluator
	}
	return evaluators, nil
}

// argoHealth runs a health script as Argo CD does: `obj` is the object as a Lua table, the
// script returns a table with `status` and `message`.
func argoHealth(script string, obj map[string]any) (verdict, error) {
	value, err := runLua(script, obj)
	if err != nil {
		return verdict{}, err
	}
	returned, ok := value.(*lua.LTable)
	if !ok {
		return verdict{}, fmt.Errorf("the health script returned %s, not a table", value.Type())
	}
	return verdict{Status: lua.LVAsString(returned.RawGetString("status")), Message: lua.LVAsString(returned.RawGetString("message"))}, nil
}

// readObjects decodes the JSON array of objects on stdin.
func readObjects() []map[string]any {
	decoder := json.NewDecoder(os.Stdin)
	decoder.UseNumber()
	var decoded []any
	check(decoder.Decode(&decoded))
	objects := make([]map[string]any, 0, len(decoded))
	for _, item := range decoded {
		obj, ok := numbers(item).(map[string]any)
		if !ok {
			check(fmt.Errorf("not an object: %v", item))
		}
		objects = append(objects, obj)
	}
	return objects
}

// numbers turns JSON numbers into int64 where they are whole (as the API server's decoder does,
// and as kstatus expects of metadata.generation) and float64 otherwise.
func numbers(value any) any {
	switch v := value.(type) {
	case map[string]any:
		for key, item := range v {
			v[key] = numbers(item)
		}
		return v
	case []any:
		for i, item := range v {
			v[i] = numbers(item)
		}
		return v
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n
		}
		f, _ := v.Float64()
		return f
	default:
		return v
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "health:", err)
		os.Exit(1)
	}
}
