// The Argo CD resource actions of an argocd-cm ConfigMap, run on objects as Argo CD's API server runs
// them: resource.customizations.actions.<group>_<kind> holds a discovery script and the action
// scripts (`definitions`). Discovery returns a table of the actions the object offers, each possibly
// `disabled`; an action returns the object changed, which Argo CD encodes as JSON (layeh.com/gopher-json,
// as it does), mends where Lua made an empty object into an empty array, and sends to the API server
// as the JSON merge patch from the live object to it (github.com/evanphx/json-patch, as it does).
// Argo CD runs a disabled action when asked to (`argocd app actions run`): an action refuses by
// raising an error, and nothing is patched.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	jsonpatch "github.com/evanphx/json-patch"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	luajson "layeh.com/gopher-json"
	"sigs.k8s.io/yaml"
)

// resourceActions is one resource.customizations.actions value of argocd-cm.
type resourceActions struct {
	Discovery   string `json:"discovery.lua"`
	Definitions []struct {
		Name   string `json:"name"`
		Action string `json:"action.lua"`
	} `json:"definitions"`
}

// offered is what Argo CD reads of one entry of the discovery table.
type offered struct {
	Disabled    bool   `json:"disabled"`
	DisplayName string `json:"displayName,omitempty"`
	IconClass   string `json:"iconClass,omitempty"`
}

// outcome of running one action: the merge patch sent (null when the object is unchanged: Argo CD
// sends nothing), or the error Argo CD reports.
type outcome struct {
	Patch map[string]any `json:"patch"`
	Error string         `json:"error,omitempty"`
}

type actionsResult struct {
	Offered map[string]offered `json:"offered"`
	Ran     map[string]outcome `json:"ran"`
}

// runActions writes, for each object, what discovery offers and what every defined action does.
func runActions(configMapPath string, objects []map[string]any) error {
	raw, err := os.ReadFile(configMapPath)
	if err != nil {
		return err
	}
	var configMap struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(raw, &configMap); err != nil {
		return err
	}
	out := make([]actionsResult, 0, len(objects))
	for _, obj := range objects {
		u := &unstructured.Unstructured{Object: obj}
		key := "resource.customizations.actions." + u.GroupVersionKind().Group + "_" + u.GetKind()
		value, ok := configMap.Data[key]
		if !ok {
			return fmt.Errorf("%s has no %s", configMapPath, key)
		}
		var actions resourceActions
		if err := yaml.Unmarshal([]byte(value), &actions); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		result := actionsResult{Ran: map[string]outcome{}}
		if result.Offered, err = discover(actions.Discovery, obj); err != nil {
			return fmt.Errorf("%s discovery.lua: %w", key, err)
		}
		for _, definition := range actions.Definitions {
			result.Ran[definition.Name] = act(definition.Action, obj)
		}
		out = append(out, result)
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// discover runs a discovery script: a table of action names to tables of their settings (an empty
// table: enabled, nothing else said).
func discover(script string, obj map[string]any) (map[string]offered, error) {
	value, err := runLua(script, obj)
	if err != nil {
		return nil, err
	}
	if value.Type() != lua.LTTable {
		return nil, fmt.Errorf("discovery returned %s, not a table", value.Type())
	}
	encoded, err := luajson.Encode(value)
	if err != nil {
		return nil, err
	}
	found := map[string]offered{}
	if string(encoded) == "[]" { // an empty table: no actions
		return found, nil
	}
	var entries map[string]any
	if err := json.Unmarshal(encoded, &entries); err != nil {
		return nil, err
	}
	for name, entry := range entries {
		var action offered
		if _, empty := entry.([]any); !empty {
			settings, err := json.Marshal(entry)
			if err != nil {
				return nil, err
			}
			if err := json.Unmarshal(settings, &action); err != nil {
				return nil, fmt.Errorf("action %s: %w", name, err)
			}
		}
		found[name] = action
	}
	return found, nil
}

// act runs an action script on a copy of the live object and returns the merge patch Argo CD would send.
func act(script string, live map[string]any) outcome {
	value, err := runLua(script, live)
	if err != nil {
		return outcome{Error: err.Error()}
	}
	if value.Type() != lua.LTTable {
		return outcome{Error: fmt.Sprintf("the action returned %s, not a table", value.Type())}
	}
	encoded, err := luajson.Encode(value)
	if err != nil {
		return outcome{Error: err.Error()}
	}
	if len(encoded) < 2 || encoded[0] != '{' {
		return outcome{Error: "the action returned a list of operations; this tool runs actions that return the object"}
	}
	var changed unstructured.Unstructured
	if err := json.Unmarshal(encoded, &changed); err != nil {
		return outcome{Error: err.Error()}
	}
	mendEmptyObjects(changed.Object, live)
	before, err := json.Marshal(live)
	if err != nil {
		return outcome{Error: err.Error()}
	}
	after, err := json.Marshal(changed.Object)
	if err != nil {
		return outcome{Error: err.Error()}
	}
	patch, err := jsonpatch.CreateMergePatch(before, after)
	if err != nil {
		return outcome{Error: err.Error()}
	}
	if string(patch) == "{}" {
		return outcome{}
	}
	var decoded map[string]any
	if err := json.Unmarshal(patch, &decoded); err != nil {
		return outcome{Error: err.Error()}
	}
	return outcome{Patch: decoded}
}

// mendEmptyObjects undoes what the JSON encoding of Lua tables does to empty objects: a field that
// was an object in the live object and came back as an empty array is an empty object again, at
// any depth (through arrays too, element by element). Argo CD mends the returned object the same way.
func mendEmptyObjects(changed, live map[string]any) {
	for key, old := range live {
		now, ok := changed[key]
		if !ok {
			continue
		}
		switch was := old.(type) {
		case map[string]any:
			switch n := now.(type) {
			case map[string]any:
				mendEmptyObjects(n, was)
			case []any:
				if len(n) == 0 {
					changed[key] = map[string]any{}
				}
			}
		case []any:
			if n, ok := now.([]any); ok {
				mendEmptyElements(n, was)
			}
		}
	}
}

func mendEmptyElements(changed, live []any) {
	for i := 0; i < len(changed) && i < len(live); i++ {
		switch was := live[i].(type) {
		case map[string]any:
			if n, ok := changed[i].(map[string]any); ok {
				mendEmptyObjects(n, was)
			}
		case []any:
			if n, ok := changed[i].([]any); ok {
				mendEmptyElements(n, was)
			}
		}
	}
}
