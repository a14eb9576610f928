// The Lua VM as Argo CD runs the scripts of its argocd-cm ConfigMap (util/lua in Argo CD): gopher-lua
// with only the package, base and table libraries open (resource.customizations.useOpenLibs is off
// by default), the object as the global `obj`, one second to finish, and a run-time error reported
// without its stack trace. Argo CD also opens a safe subset of the os library (os.time, os.date);
// Slipway's scripts do not use it, and a script that did fails here rather than passing untested.
package main

import (
	"context"
	"errors"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// runLua runs a script on `obj` and returns the value it returned.
func runLua(script string, obj map[string]any) (lua.LValue, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		l.Push(l.NewFunction(lib.open))
		l.Push(lua.LString(lib.name))
		l.Call(1, 0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", toLua(l, obj))
	compiled, err := l.LoadString(script)
	if err != nil {
		return nil, err
	}
	l.Push(compiled)
	if err := l.PCall(0, lua.MultRet, nil); err != nil {
		var apiErr *lua.ApiError
		if errors.As(err, &apiErr) && apiErr.Type == lua.ApiErrorRun {
			apiErr.StackTrace = "" // what the user of Argo CD reads: the script's message alone
		}
		return nil, err
	}
	return l.Get(-1), nil
}

// toLua converts decoded JSON as Argo CD does: objects and arrays become tables (arrays from 1), null is nil.
func toLua(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case map[string]any:
		t := l.CreateTable(0, len(v))
		for key, item := range v {
			t.RawSetH(lua.LString(key), toLua(l, item))
		}
		return t
	case []any:
		t := l.CreateTable(len(v), 0)
		for _, item := range v {
			t.Append(toLua(l, item))
		}
		return t
	case string:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case bool:
		return lua.LBool(v)
	default:
		return lua.LNil
	}
}
