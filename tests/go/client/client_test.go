// Batch, scan and operate through the official Go client against a real
// bolided (issue 5: "Go BatchGet, BatchExists, BatchOperate"). The server's
// port comes from BOLIDE_PORT; tests/go/smoke.sh starts the node and runs
// `go test` here.
package client

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"
)

const ns = "test"

func connect(t *testing.T) *as.Client {
	t.Helper()
	port, err := strconv.Atoi(os.Getenv("BOLIDE_PORT"))
	if err != nil {
		t.Fatalf("BOLIDE_PORT not set: %v", err)
	}
	client, aerr := as.NewClient("127.0.0.1", port)
	if aerr != nil {
		t.Fatalf("connect: %v", aerr)
	}
	t.Cleanup(client.Close)
	return client
}

func key(t *testing.T, set string, i int) *as.Key {
	t.Helper()
	k, err := as.NewKey(ns, set, i)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// unique gives each test run sets of its own, so a rerun against the same
// node starts from nothing.
var unique = strconv.FormatInt(time.Now().UnixNano()%1_000_000_000, 36)

// put writes n records {n: i, s: "v<i>"} to set.
func put(t *testing.T, client *as.Client, set string, n int) []*as.Key {
	t.Helper()
	keys := make([]*as.Key, n)
	for i := range keys {
		keys[i] = key(t, set, i)
		if err := client.Put(nil, keys[i], as.BinMap{"n": i, "s": "v" + strconv.Itoa(i)}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	return keys
}

func TestBatchGetAndExists(t *testing.T) {
	client := connect(t)
	keys := put(t, client, "go_batch_get_"+unique, 20)
	keys = append(keys, key(t, "go_batch_get_"+unique, 999)) // missing

	records, err := client.BatchGet(nil, keys)
	if err != nil {
		t.Fatalf("BatchGet: %v", err)
	}
	if len(records) != len(keys) {
		t.Fatalf("BatchGet: %d records for %d keys", len(records), len(keys))
	}
	for i, rec := range records[:20] {
		if rec == nil || rec.Bins["n"] != i || rec.Bins["s"] != "v"+strconv.Itoa(i) {
			t.Fatalf("BatchGet record %d: %v", i, rec)
		}
	}
	if records[20] != nil {
		t.Fatalf("BatchGet of a missing key: %v", records[20])
	}

	// Named bins only.
	records, err = client.BatchGet(nil, keys[:3], "s")
	if err != nil {
		t.Fatalf("BatchGet named: %v", err)
	}
	for i, rec := range records {
		if len(rec.Bins) != 1 || rec.Bins["s"] != "v"+strconv.Itoa(i) {
			t.Fatalf("BatchGet named bins, record %d: %v", i, rec.Bins)
		}
	}

	// Headers: generation, no bins.
	headers, err := client.BatchGetHeader(nil, keys[:2])
	if err != nil {
		t.Fatalf("BatchGetHeader: %v", err)
	}
	for _, rec := range headers {
		if rec == nil || rec.Generation != 1 || len(rec.Bins) != 0 {
			t.Fatalf("BatchGetHeader: %v", rec)
		}
	}

	exists, err := client.BatchExists(nil, keys)
	if err != nil {
		t.Fatalf("BatchExists: %v", err)
	}
	for i, ok := range exists {
		if ok != (i < 20) {
			t.Fatalf("BatchExists[%d] = %v", i, ok)
		}
	}
}

func TestBatchOperateReadsWritesDeletes(t *testing.T) {
	client := connect(t)
	keys := put(t, client, "go_batch_operate_"+unique, 4)
	missing := key(t, "go_batch_operate_"+unique, 77)

	writePolicy := as.NewBatchWritePolicy()
	updateOnly := as.NewBatchWritePolicy()
	updateOnly.RecordExistsAction = as.UPDATE_ONLY
	records := []as.BatchRecordIfc{
		as.NewBatchRead(nil, keys[0], []string{"s"}),
		as.NewBatchWrite(writePolicy, keys[1], as.AddOp(as.NewBin("n", 10)), as.GetBinOp("n")),
		as.NewBatchWrite(writePolicy, keys[2], as.ListAppendOp("l", 1, 2, 3), as.ListSizeOp("l")),
		as.NewBatchDelete(nil, keys[3]),
		as.NewBatchWrite(updateOnly, missing, as.PutOp(as.NewBin("x", 1))),
	}
	if err := client.BatchOperate(nil, records); err != nil {
		t.Fatalf("BatchOperate: %v", err)
	}
	codes := make([]types.ResultCode, len(records))
	for i, r := range records {
		codes[i] = r.BatchRec().ResultCode
	}
	want := []types.ResultCode{types.OK, types.OK, types.OK, types.OK, types.KEY_NOT_FOUND_ERROR}
	for i := range want {
		if codes[i] != want[i] {
			t.Fatalf("result codes %v, want %v", codes, want)
		}
	}
	if got := records[0].BatchRec().Record.Bins["s"]; got != "v0" {
		t.Fatalf("batch read: %v", got)
	}
	// Batch writes ask for an answer per op (RESPOND_ALL_OPS), so a bin
	// named by two ops carries both results: the add's nil, then the read.
	if got := fmt.Sprint(records[1].BatchRec().Record.Bins["n"]); got != "[<nil> 11]" {
		t.Fatalf("batch add then read: %v", got)
	}
	// ListAppend answers the new size, ListSize the size.
	if got := fmt.Sprint(records[2].BatchRec().Record.Bins["l"]); got != "[3 3]" {
		t.Fatalf("batch list append then size: %v", got)
	}
	if ok, err := client.Exists(nil, keys[3]); err != nil || ok {
		t.Fatalf("batch delete left the record: %v %v", ok, err)
	}
	if rec, err := client.Get(nil, keys[1]); err != nil || rec.Bins["n"] != 11 {
		t.Fatalf("batch write not stored: %v %v", rec, err)
	}

	// BatchGetOperate: the same read ops on every key.
	recs, err := client.BatchGetOperate(nil, keys[:3], as.GetBinOp("n"))
	if err != nil {
		t.Fatalf("BatchGetOperate: %v", err)
	}
	got := []int{recs[0].Bins["n"].(int), recs[1].Bins["n"].(int), recs[2].Bins["n"].(int)}
	if got[0] != 0 || got[1] != 11 || got[2] != 2 {
		t.Fatalf("BatchGetOperate: %v", got)
	}
}

func TestScanAllAndPartitions(t *testing.T) {
	client := connect(t)
	put(t, client, "go_scan_"+unique, 300)

	recordset, err := client.ScanAll(nil, ns, "go_scan_"+unique)
	if err != nil {
		t.Fatalf("ScanAll: %v", err)
	}
	var seen []int
	for res := range recordset.Results() {
		if res.Err != nil {
			t.Fatalf("ScanAll: %v", res.Err)
		}
		seen = append(seen, res.Record.Bins["n"].(int))
	}
	sort.Ints(seen)
	if len(seen) != 300 || seen[0] != 0 || seen[299] != 299 {
		t.Fatalf("ScanAll: %d records", len(seen))
	}

	// A query without a filter over half the partitions, twice, is half
	// the records each time with no record in both halves.
	stmt := as.NewStatement(ns, "go_scan_"+unique)
	count := func(filter *as.PartitionFilter) map[int]bool {
		rs, err := client.QueryPartitions(nil, stmt, filter)
		if err != nil {
			t.Fatalf("QueryPartitions: %v", err)
		}
		found := map[int]bool{}
		for res := range rs.Results() {
			if res.Err != nil {
				t.Fatalf("QueryPartitions: %v", res.Err)
			}
			found[res.Record.Bins["n"].(int)] = true
		}
		return found
	}
	low := count(as.NewPartitionFilterByRange(0, 2048))
	high := count(as.NewPartitionFilterByRange(2048, 2048))
	if len(low)+len(high) != 300 || len(low) == 0 || len(high) == 0 {
		t.Fatalf("partition halves: %d + %d", len(low), len(high))
	}
	for n := range low {
		if high[n] {
			t.Fatalf("record %d in both halves", n)
		}
	}
}

func TestBatchOf10000Keys(t *testing.T) {
	client := connect(t)
	keys := put(t, client, "go_batch_large_"+unique, 10_000)
	records, err := client.BatchGet(nil, keys, "n")
	if err != nil {
		t.Fatalf("BatchGet of 10,000 keys: %v", err)
	}
	for i, rec := range records {
		if rec == nil || rec.Bins["n"] != i {
			t.Fatalf("record %d of 10,000: %v", i, rec)
		}
	}
}
