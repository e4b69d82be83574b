package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"
)

// registerInput is one operation on a register: a write of Value, or a
// read.
type registerInput struct {
	Write bool
	Value int64
}

// registerModel is a single register per key: its state is the value last
// written (0 before any write, which a read of a missing record returns).
// Every write succeeds; a read must return the state.
var registerModel = porcupine.Model{
	Init: func() interface{} { return int64(0) },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		in := input.(registerInput)
		if in.Write {
			return true, in.Value
		}
		return output.(int64) == state.(int64), state
	},
	Equal: func(a, b interface{}) bool { return a.(int64) == b.(int64) },
	Hash:  func(state interface{}) uint64 { return uint64(state.(int64)) },
	DescribeOperation: func(input, output interface{}) string {
		in := input.(registerInput)
		if in.Write {
			return fmt.Sprintf("write(%s)", describeValue(in.Value))
		}
		return fmt.Sprintf("read() -> %s", describeValue(output.(int64)))
	},
	DescribeState: func(state interface{}) string { return describeValue(state.(int64)) },
	DescribeOperationMetadata: func(info interface{}) string {
		if info == nil {
			return ""
		}
		return info.(string)
	},
}

func describeValue(v int64) string {
	if v == 0 {
		return "none"
	}
	return fmt.Sprint(v)
}

// operations turns one key's recorded operations into Porcupine's: an
// operation that definitely failed is left out (it did not happen); a
// write in doubt returns after everything else, so it may take effect at
// any point after its call, or (placed last) never.
func operations(ops []Op) []porcupine.Operation {
	var end int64
	for _, op := range ops {
		if op.Call > end {
			end = op.Call
		}
		if op.Return > end {
			end = op.Return
		}
	}
	clients := map[int]int{}
	var out []porcupine.Operation
	for _, op := range ops {
		if op.Outcome == OutcomeFail {
			continue
		}
		client, ok := clients[op.Process]
		if !ok {
			client = len(clients)
			clients[op.Process] = client
		}
		ret, meta := op.Return, fmt.Sprintf("process %d", op.Process)
		if op.Outcome == OutcomeInDoubt {
			ret = end + 1
			meta = fmt.Sprintf("process %d, in doubt (code %d): %s", op.Process, op.Code, op.Error)
		}
		var output interface{}
		if op.Kind == KindRead {
			output = op.Value
		}
		out = append(out, porcupine.Operation{
			ClientId: client,
			Input:    registerInput{Write: op.Kind == KindWrite, Value: op.Value},
			Call:     op.Call,
			Output:   output,
			Return:   ret,
			Metadata: meta,
		})
	}
	return out
}

// KeyResult is the verdict on one key's history.
type KeyResult struct {
	Key    string                `json:"key"`
	Result porcupine.CheckResult `json:"result"`
	Ops    int                   `json:"ops"`
	// Visualization: the HTML file written for a key that is not
	// linearizable (or could not be decided in time).
	Visualization string `json:"visualization,omitempty"`
}

// check checks every key's history against a register and, for a key
// that is not Ok, writes Porcupine's HTML visualisation into htmlDir (if
// given), with the harness's events as annotations.
func check(history History, timeout time.Duration, htmlDir string) ([]KeyResult, error) {
	byKey := map[string][]Op{}
	for _, op := range history.Ops {
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	var results []KeyResult
	for _, key := range history.Keys() {
		ops := operations(byKey[key])
		result, info := porcupine.CheckOperationsVerbose(registerModel, ops, timeout)
		r := KeyResult{Key: key, Result: result, Ops: len(ops)}
		if result != porcupine.Ok && htmlDir != "" {
			var annotations []porcupine.Annotation
			for _, event := range history.Events {
				annotations = append(annotations, porcupine.Annotation{
					Tag: "harness", Start: event.At, Description: event.Text,
				})
			}
			info.AddAnnotations(annotations)
			if err := os.MkdirAll(htmlDir, 0o755); err != nil {
				return nil, err
			}
			path := filepath.Join(htmlDir, fmt.Sprintf("%s.html", key))
			if err := porcupine.VisualizePath(registerModel, info, path); err != nil {
				return nil, fmt.Errorf("visualising %s: %w", key, err)
			}
			r.Visualization = path
		}
		results = append(results, r)
	}
	return results, nil
}
