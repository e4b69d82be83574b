// Command linearizability records histories of writes and linearize reads
// through the official Go client against a strong-consistency namespace
// and checks them with Porcupine against a register per key.
//
//	linearizability record -hosts 127.0.0.2:3000,127.0.0.3:3000 -out history.json [-html DIR]
//	linearizability check -history history.json [-html DIR]
//
// `record` runs its workers until its standard input closes (or -duration
// passes); every line read before that is an event of the fault harness,
// kept in the history and shown in the visualisation. It then writes the
// history, checks it and prints one JSON summary line. Exit status: 0 when
// every key's history is linearizable, 1 when one is not (or could not be
// decided within -check-timeout; the HTML visualisation of each such key
// goes to -html), 2 on a usage or connection error.
//
// tests/python/sc_linearizability.py starts the nodes in a network
// namespace, drives the faults and runs this; docs/strong-consistency.md
// has the commands.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/anishathalye/porcupine"
)

// Summary is the JSON line the recorder and the checker print.
type Summary struct {
	Linearizable bool        `json:"linearizable"`
	Counts       Counts      `json:"counts"`
	PerKey       []KeyCounts `json:"per_key"`
	Results      []KeyResult `json:"results"`
	History      string      `json:"history,omitempty"`
	CheckSeconds float64     `json:"check_seconds"`
}

// KeyCounts: one key's acknowledged writes and answered reads.
type KeyCounts struct {
	Key      string `json:"key"`
	WritesOk int    `json:"writes_ok"`
	ReadsOk  int    `json:"reads_ok"`
	InDoubt  int    `json:"in_doubt"`
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "record":
		os.Exit(record(os.Args[2:]))
	case "check":
		os.Exit(checkFile(os.Args[2:]))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: linearizability record|check [flags] (-h for the flags)")
	os.Exit(2)
}

func record(args []string) int {
	flags := flag.NewFlagSet("record", flag.ExitOnError)
	hosts := flags.String("hosts", "127.0.0.1:3000", "seed nodes, host:port,...")
	namespace := flags.String("namespace", "test", "the strong-consistency namespace")
	set := flags.String("set", "lin", "set of the keys")
	keyCount := flags.Int("keys", 5, "number of keys (registers)")
	prefix := flags.String("key-prefix", fmt.Sprintf("k%d-", time.Now().UnixNano()), "key names' prefix (fresh keys per run)")
	clients := flags.Int("clients", 2, "client instances (each its own view of the cluster)")
	workers := flags.Int("workers", 8, "concurrent workers, spread over the clients")
	think := flags.Duration("think", 10*time.Millisecond, "random pause up to this between a worker's operations")
	timeout := flags.Duration("timeout", 1500*time.Millisecond, "total timeout of each command")
	duration := flags.Duration("duration", 30*time.Minute, "stop after this even if stdin stays open")
	seed := flags.Int64("seed", 1, "the workers' random seed")
	out := flags.String("out", "history.json", "where to write the history")
	html := flags.String("html", "", "directory for the visualisation of a key that fails the check")
	checkTimeout := flags.Duration("check-timeout", 5*time.Minute, "give up checking a key after this")
	_ = flags.Parse(args)

	w := &workload{
		namespace: *namespace, set: *set, clients: *clients, workers: *workers,
		think: *think, timeout: *timeout, duration: *duration, seed: *seed,
	}
	for _, hp := range strings.Split(*hosts, ",") {
		host, port, ok := strings.Cut(strings.TrimSpace(hp), ":")
		p, err := strconv.Atoi(port)
		if !ok || err != nil {
			fmt.Fprintf(os.Stderr, "bad host %q: want host:port\n", hp)
			return 2
		}
		w.hosts = append(w.hosts, as.NewHost(host, p))
	}
	for i := 0; i < *keyCount; i++ {
		w.keys = append(w.keys, fmt.Sprintf("%s%d", *prefix, i))
	}
	if *clients < 1 || *workers < 1 || len(w.keys) < 1 {
		fmt.Fprintln(os.Stderr, "-clients, -workers and -keys must be at least 1")
		return 2
	}
	history, err := w.run(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := writeHistory(*out, history); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return verdict(history, *out, *checkTimeout, *html)
}

func checkFile(args []string) int {
	flags := flag.NewFlagSet("check", flag.ExitOnError)
	path := flags.String("history", "history.json", "the history to check")
	html := flags.String("html", "", "directory for the visualisation of a key that fails the check")
	checkTimeout := flags.Duration("check-timeout", 5*time.Minute, "give up checking a key after this")
	_ = flags.Parse(args)
	history, err := readHistory(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return verdict(history, *path, *checkTimeout, *html)
}

func verdict(history History, path string, timeout time.Duration, html string) int {
	started := time.Now()
	results, err := check(history, timeout, html)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	summary := Summary{
		Linearizable: true, Counts: count(history.Ops), Results: results, History: path,
		CheckSeconds: time.Since(started).Seconds(),
	}
	for _, r := range results {
		if r.Result != porcupine.Ok {
			summary.Linearizable = false
		}
	}
	byKey := map[string]*KeyCounts{}
	for _, key := range history.Keys() {
		summary.PerKey = append(summary.PerKey, KeyCounts{Key: key})
	}
	for i := range summary.PerKey {
		byKey[summary.PerKey[i].Key] = &summary.PerKey[i]
	}
	for _, op := range history.Ops {
		k := byKey[op.Key]
		switch {
		case op.Outcome == OutcomeInDoubt:
			k.InDoubt++
		case op.Outcome != OutcomeOk:
		case op.Kind == KindWrite:
			k.WritesOk++
		default:
			k.ReadsOk++
		}
	}
	line, _ := json.Marshal(summary)
	fmt.Println(string(line))
	if !summary.Linearizable {
		return 1
	}
	return 0
}
