// promqlparse reads PromQL queries as Prometheus does, for the fuzzing of Slipway's confinement
// (tests/unit/prometheus/test_promql_fuzz.py). Each line of stdin is a JSON string (one query); each line of
// stdout is the JSON answer for it, under two parsers: "default" (the options of a Prometheus
// started without feature flags, as Slipway's local one is) and "features" (experimental
// functions, fill modifiers and unquoted UTF-8 names on, as an admin may enable). Each answer is
// {"error": "..."} or {"selectors": [[{"name", "type", "value"}, ...], ...]}: every vector
// selector (those of range selectors, subqueries and info() included) with its label matchers.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/prometheus/prometheus/promql/parser"
)

type matcher struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Value string `json:"value"`
}

type answer struct {
	Error     string      `json:"error,omitempty"`
	Selectors [][]matcher `json:"selectors"`
}

func read(p parser.Parser, query string) answer {
	expr, err := p.ParseExpr(query)
	if err != nil {
		return answer{Error: err.Error()}
	}
	out := answer{Selectors: [][]matcher{}}
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			ms := []matcher{}
			for _, m := range vs.LabelMatchers {
				ms = append(ms, matcher{Name: m.Name, Type: m.Type.String(), Value: m.Value})
			}
			out.Selectors = append(out.Selectors, ms)
		}
		return nil
	})
	return out
}

func main() {
	standard := parser.NewParser(parser.Options{})
	features := parser.NewParser(parser.Options{
		EnableExperimentalFunctions: true,
		EnableBinopFillModifiers:    true,
		EnableUnquotedUTF8Names:     true,
	})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for in.Scan() {
		var query string
		if err := json.Unmarshal(in.Bytes(), &query); err != nil {
			fmt.Fprintf(os.Stderr, "promqlparse: a line is not a JSON string: %v\n", err)
			os.Exit(2)
		}
		if err := enc.Encode(map[string]answer{"default": read(standard, query), "features": read(features, query)}); err != nil {
			fmt.Fprintf(os.Stderr, "promqlparse: %v\n", err)
			os.Exit(2)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "promqlparse: %v\n", err)
		os.Exit(2)
	}
}
