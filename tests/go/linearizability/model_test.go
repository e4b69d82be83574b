package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func w(process int, value, call, ret int64) Op {
	return Op{Process: process, Key: "k", Kind: KindWrite, Value: value, Call: call, Return: ret, Outcome: OutcomeOk}
}

func r(process int, value, call, ret int64) Op {
	return Op{Process: process, Key: "k", Kind: KindRead, Value: value, Call: call, Return: ret, Outcome: OutcomeOk}
}

func inDoubt(op Op) Op {
	op.Outcome, op.Return, op.Code = OutcomeInDoubt, -1, 9
	return op
}

func failed(op Op) Op {
	op.Outcome, op.Code = OutcomeFail, 11
	return op
}

func verdictOf(t *testing.T, ops ...Op) porcupine.CheckResult {
	t.Helper()
	results, err := check(History{Ops: ops}, 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 {
		t.Fatalf("want one key's result, got %v", results)
	}
	return results[0].Result
}

func TestSequentialHistoryIsLinearizable(t *testing.T) {
	got := verdictOf(t, r(1, 0, 0, 5), w(1, 7, 10, 20), r(2, 7, 30, 40), w(2, 8, 50, 60), r(1, 8, 70, 80))
	if got != porcupine.Ok {
		t.Fatalf("got %s", got)
	}
}

// The checker must be able to fail: a read that returns the value an
// acknowledged write replaced, after that write returned.
func TestStaleReadAfterAcknowledgedWriteIsRejected(t *testing.T) {
	got := verdictOf(t, w(1, 1, 0, 10), w(2, 2, 20, 30), r(3, 1, 40, 50))
	if got != porcupine.Illegal {
		t.Fatalf("a stale read after an acknowledged write: got %s, want Illegal", got)
	}
}

// An acknowledged write lost: a later read finds no record.
func TestLostWriteIsRejected(t *testing.T) {
	got := verdictOf(t, w(1, 1, 0, 10), r(2, 0, 20, 30))
	if got != porcupine.Illegal {
		t.Fatalf("got %s, want Illegal", got)
	}
}

// A read concurrent with a write may see either value.
func TestConcurrentReadSeesEitherValue(t *testing.T) {
	for _, seen := range []int64{1, 2} {
		if got := verdictOf(t, w(1, 1, 0, 10), w(2, 2, 20, 60), r(3, seen, 30, 40)); got != porcupine.Ok {
			t.Fatalf("read %d concurrent with write(2): got %s", seen, got)
		}
	}
}

// A write in doubt may take effect late, or never.
func TestWriteInDoubtMayApplyLateOrNever(t *testing.T) {
	applied := verdictOf(t, w(1, 1, 0, 10), inDoubt(w(2, 2, 20, 0)), r(3, 1, 100, 110), r(3, 2, 200, 210))
	if applied != porcupine.Ok {
		t.Fatalf("in-doubt write seen late: got %s", applied)
	}
	never := verdictOf(t, w(1, 1, 0, 10), inDoubt(w(2, 2, 20, 0)), r(3, 1, 100, 110), r(3, 1, 200, 210))
	if never != porcupine.Ok {
		t.Fatalf("in-doubt write never seen: got %s", never)
	}
}

// Once a read saw the in-doubt write, it has happened: the old value may
// not come back.
func TestWriteInDoubtSeenThenUnseenIsRejected(t *testing.T) {
	got := verdictOf(t, w(1, 1, 0, 10), inDoubt(w(2, 2, 20, 0)), r(3, 2, 30, 40), r(3, 1, 50, 60))
	if got != porcupine.Illegal {
		t.Fatalf("got %s, want Illegal", got)
	}
}

// A definite failure did not happen: a read may not see its value.
func TestDefinitelyFailedWriteSeenIsRejected(t *testing.T) {
	got := verdictOf(t, w(1, 1, 0, 10), failed(w(2, 2, 20, 30)), r(3, 2, 40, 50))
	if got != porcupine.Illegal {
		t.Fatalf("got %s, want Illegal", got)
	}
	if got := verdictOf(t, w(1, 1, 0, 10), failed(w(2, 2, 20, 30)), r(3, 1, 40, 50)); got != porcupine.Ok {
		t.Fatalf("failed write unseen: got %s", got)
	}
}

// A failing key's history is written out as Porcupine's visualisation,
// the harness's events included.
func TestFailingKeyIsVisualised(t *testing.T) {
	dir := t.TempDir()
	history := History{
		Ops:    []Op{w(1, 1, 0, 10), w(2, 2, 20, 30), r(3, 1, 40, 50)},
		Events: []Event{{At: 15, Text: "split A1|A2,A3"}},
	}
	history.Ops = append(history.Ops, Op{Process: 4, Key: "other", Kind: KindWrite, Value: 5, Call: 0, Return: 5, Outcome: OutcomeOk})
	results, err := check(history, 10*time.Second, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 || results[0].Key != "k" || results[1].Key != "other" {
		t.Fatalf("results: %+v", results)
	}
	if results[0].Result != porcupine.Illegal || results[1].Result != porcupine.Ok {
		t.Fatalf("results: %+v", results)
	}
	if results[1].Visualization != "" {
		t.Fatalf("a linearizable key was visualised: %+v", results[1])
	}
	page, err := os.ReadFile(filepath.Join(dir, "k.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<html", "split A1|A2,A3", "read() -\\u003e 1"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the visualisation lacks %q", want)
		}
	}
}

func TestHistoryRoundTripsThroughJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.json")
	history := History{Ops: []Op{w(1, 1, 0, 10), inDoubt(w(2, 2, 20, 0)), failed(r(3, 0, 1, 2))},
		Events: []Event{{At: 3, Text: "kill -9 A2"}}}
	if err := writeHistory(path, history); err != nil {
		t.Fatal(err)
	}
	back, err := readHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Ops) != 3 || back.Ops[1] != history.Ops[1] || back.Events[0] != history.Events[0] {
		t.Fatalf("round trip: %+v", back)
	}
	c := count(back.Ops)
	if c.WritesOk != 1 || c.WritesInDoubt != 1 || c.ReadsFailed != 1 || c.FailedCodes[9] != 1 || c.FailedCodes[11] != 1 {
		t.Fatalf("counts: %+v", c)
	}
}

func TestReplicasRegime(t *testing.T) {
	answer := "bar:0,1,AAA=;test:12,2,AAA=,AAA="
	if got := replicasRegime(answer, "test"); got != 12 {
		t.Fatalf("got %d", got)
	}
	if got := replicasRegime(answer, "bar"); got != 0 {
		t.Fatalf("got %d", got)
	}
	if got := replicasRegime(answer, "nope"); got != -1 {
		t.Fatalf("got %d", got)
	}
}
