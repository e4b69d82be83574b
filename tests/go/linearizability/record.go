package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"
)

// workload is what the recorder runs.
type workload struct {
	hosts     []*as.Host
	namespace string
	set       string
	keys      []string
	clients   int
	workers   int
	think     time.Duration
	timeout   time.Duration
	duration  time.Duration
	seed      int64
}

// recorder collects the history: operations and the harness's events,
// timed on one monotonic clock.
type recorder struct {
	start       time.Time
	mu          sync.Mutex
	ops         []Op
	events      []Event
	nextProcess atomic.Int64
}

func (r *recorder) now() int64 { return time.Since(r.start).Nanoseconds() }

func (r *recorder) add(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

func (r *recorder) event(text string) {
	at := r.now()
	r.mu.Lock()
	r.events = append(r.events, Event{At: at, Text: text})
	r.mu.Unlock()
}

// classify reads the client's verdict on a failed command: its result
// code and whether it flagged the command in doubt (sent, and timed out
// or lost its connection).
func classify(err as.Error) (code int, inDoubt bool) {
	var ae *as.AerospikeError
	if errors.As(err, &ae) {
		code = int(ae.ResultCode)
	}
	return code, err.IsInDoubt()
}

func (w *workload) connect() ([]*as.Client, error) {
	policy := as.NewClientPolicy()
	policy.Timeout = 2 * time.Second
	policy.TendInterval = 250 * time.Millisecond
	policy.IdleTimeout = 5 * time.Second
	var clients []*as.Client
	for i := 0; i < w.clients; i++ {
		client, err := as.NewClientWithPolicyAndHost(policy, w.hosts...)
		if err != nil {
			for _, c := range clients {
				c.Close()
			}
			return nil, fmt.Errorf("connecting to %v: %w", w.hosts, err)
		}
		clients = append(clients, client)
	}
	// The clients choose SC routing for the namespace from the regime in
	// the nodes' `replicas` answers: it must be non-zero on every node, or
	// the reads would not be linearize reads at all.
	for _, node := range clients[0].GetNodes() {
		answer, err := node.RequestInfo(as.NewInfoPolicy(), "replicas")
		if err != nil {
			return nil, fmt.Errorf("replicas from %s: %w", node.GetName(), err)
		}
		if regime := replicasRegime(answer["replicas"], w.namespace); regime <= 0 {
			return nil, fmt.Errorf("%s reports regime %d for %s: not a strong-consistency namespace",
				node.GetName(), regime, w.namespace)
		}
	}
	return clients, nil
}

// run records until stdin closes (or the duration passes). Each line read
// from stdin before that is an event of the harness ("split A|B,C").
func (w *workload) run(stdin io.Reader) (History, error) {
	clients, err := w.connect()
	if err != nil {
		return History{}, err
	}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	rec := &recorder{start: time.Now()}
	stop := make(chan struct{})
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }) }
	go func() {
		scanner := bufio.NewScanner(stdin)
		for scanner.Scan() {
			if line := strings.TrimSpace(scanner.Text()); line != "" {
				rec.event(line)
			}
		}
		halt()
	}()
	if w.duration > 0 {
		time.AfterFunc(w.duration, halt)
	}
	fmt.Println("recording")
	var wg sync.WaitGroup
	for i := 0; i < w.workers; i++ {
		wg.Add(1)
		go func(worker int) {
			defer wg.Done()
			w.worker(rec, clients[worker%len(clients)], worker, stop)
		}(i)
	}
	<-stop
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	// Every operation is bounded by its policy's total timeout, retries
	// included.
	select {
	case <-done:
	case <-time.After(4*w.timeout + 10*time.Second):
		return History{}, errors.New("workers still running long after the stop")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return History{Ops: rec.ops, Events: rec.events}, nil
}

func (w *workload) worker(rec *recorder, client *as.Client, worker int, stop <-chan struct{}) {
	rng := rand.New(rand.NewSource(w.seed*1000 + int64(worker)))
	write := as.NewWritePolicy(0, 0)
	// No retries: a write sent once either answers, or fails definitely,
	// or is in doubt (Aerospike's advice for SC writes).
	write.MaxRetries = 0
	write.TotalTimeout = w.timeout
	write.SocketTimeout = w.timeout
	read := as.NewPolicy()
	read.ReadModeSC = as.ReadModeSCLinearize
	read.MaxRetries = 2
	read.SleepBetweenRetries = 50 * time.Millisecond
	read.TotalTimeout = w.timeout
	read.SocketTimeout = w.timeout
	process := int(rec.nextProcess.Add(1))
	var sequence int64
	for {
		select {
		case <-stop:
			return
		default:
		}
		name := w.keys[rng.Intn(len(w.keys))]
		key, err := as.NewKey(w.namespace, w.set, name)
		if err != nil {
			panic(err)
		}
		op := Op{Process: process, Key: name}
		if rng.Intn(2) == 0 {
			op.Kind = KindRead
			op.Call = rec.now()
			record, err := client.Get(read, key, "v")
			op.Return = rec.now()
			switch {
			case err == nil:
				op.Outcome = OutcomeOk
				op.Value = binValue(record)
			case err.Matches(types.KEY_NOT_FOUND_ERROR):
				op.Outcome = OutcomeOk
			default:
				op.Outcome = OutcomeFail
				op.Code, _ = classify(err)
				op.Error = err.Error()
			}
		} else {
			sequence++
			op.Kind = KindWrite
			op.Value = int64(worker+1)*1_000_000_000 + sequence
			op.Call = rec.now()
			err := client.Put(write, key, as.BinMap{"v": op.Value})
			op.Return = rec.now()
			if err == nil {
				op.Outcome = OutcomeOk
			} else {
				code, inDoubt := classify(err)
				op.Code, op.Error = code, err.Error()
				op.Outcome = OutcomeFail
				if inDoubt {
					// Its outcome may never be known: this process is
					// done, the worker goes on as a new one.
					op.Outcome = OutcomeInDoubt
					op.Return = -1
				}
			}
		}
		rec.add(op)
		if op.Outcome == OutcomeInDoubt {
			process = int(rec.nextProcess.Add(1))
		}
		if w.think > 0 {
			time.Sleep(time.Duration(rng.Int63n(int64(w.think) + 1)))
		}
	}
}

// replicasRegime is the regime of namespace in a `replicas` answer
// (`ns:regime,columns,bitmaps...;...`), -1 if absent.
func replicasRegime(answer, namespace string) int64 {
	for _, entry := range strings.Split(answer, ";") {
		name, rest, ok := strings.Cut(entry, ":")
		if !ok || name != namespace {
			continue
		}
		first, _, _ := strings.Cut(rest, ",")
		regime, err := strconv.ParseInt(first, 10, 64)
		if err != nil {
			return -1
		}
		return regime
	}
	return -1
}

func binValue(record *as.Record) int64 {
	if record == nil {
		return 0
	}
	switch v := record.Bins["v"].(type) {
	case int:
		return int64(v)
	case int64:
		return v
	default:
		// A value this workload never writes: a non-zero value no write
		// has, so the checker rejects the read.
		return -1
	}
}
