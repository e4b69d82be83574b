package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
)

// Kind of an operation: a write of a unique value, or a linearize read.
const (
	KindWrite = "write"
	KindRead  = "read"
)

// Outcome of an operation, as Jepsen and Knossos name them.
const (
	// OutcomeOk: the operation took effect (a write acknowledged, a read
	// answered, NOT_FOUND included).
	OutcomeOk = "ok"
	// OutcomeInDoubt: a write the client flagged in doubt (a timeout or a
	// lost connection after the command was sent): it may have taken
	// effect at any time after its call, or never.
	OutcomeInDoubt = "in-doubt"
	// OutcomeFail: definitely did not take effect (a write refused with a
	// result code the client does not flag in doubt, a read that failed).
	OutcomeFail = "fail"
)

// Op is one operation of the recorded history.
type Op struct {
	// Process: the logical client. A process whose write ends in doubt
	// is considered crashed and its worker goes on as a new process.
	Process int    `json:"process"`
	Key     string `json:"key"`
	Kind    string `json:"kind"`
	// Value written, or value read (0: no record).
	Value int64 `json:"value"`
	// Call and Return: nanoseconds since the recorder started, from one
	// monotonic clock. Return is -1 for an operation in doubt.
	Call    int64  `json:"call"`
	Return  int64  `json:"return"`
	Outcome string `json:"outcome"`
	// Code: the client's result code for a failed or in-doubt operation.
	Code  int    `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
}

// Event is something the fault harness did, at a recorder time.
type Event struct {
	At   int64  `json:"at"`
	Text string `json:"text"`
}

// History is what the recorder writes and the checker reads.
type History struct {
	Ops    []Op    `json:"ops"`
	Events []Event `json:"events"`
}

func readHistory(path string) (History, error) {
	var history History
	data, err := os.ReadFile(path)
	if err != nil {
		return history, err
	}
	if err := json.Unmarshal(data, &history); err != nil {
		return history, fmt.Errorf("%s: %w", path, err)
	}
	return history, nil
}

func writeHistory(path string, history History) error {
	data, err := json.Marshal(history)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// Keys of the history, sorted.
func (h History) Keys() []string {
	seen := map[string]bool{}
	var keys []string
	for _, op := range h.Ops {
		if !seen[op.Key] {
			seen[op.Key] = true
			keys = append(keys, op.Key)
		}
	}
	sort.Strings(keys)
	return keys
}

// Counts of operations by kind and outcome, for the summary.
type Counts struct {
	WritesOk      int `json:"writes_ok"`
	WritesInDoubt int `json:"writes_in_doubt"`
	WritesFailed  int `json:"writes_failed"`
	ReadsOk       int `json:"reads_ok"`
	ReadsFailed   int `json:"reads_failed"`
	// FailedCodes: result code → failed or in-doubt operations with it.
	FailedCodes map[int]int `json:"codes"`
}

func count(ops []Op) Counts {
	c := Counts{FailedCodes: map[int]int{}}
	for _, op := range ops {
		switch {
		case op.Kind == KindWrite && op.Outcome == OutcomeOk:
			c.WritesOk++
		case op.Kind == KindWrite && op.Outcome == OutcomeInDoubt:
			c.WritesInDoubt++
		case op.Kind == KindWrite:
			c.WritesFailed++
		case op.Outcome == OutcomeOk:
			c.ReadsOk++
		default:
			c.ReadsFailed++
		}
		if op.Outcome != OutcomeOk {
			c.FailedCodes[op.Code]++
		}
	}
	return c
}
