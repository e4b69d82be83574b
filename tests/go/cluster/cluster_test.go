// The official Go client against a 3-node, RF 2 cluster of real bolided
// processes, given one seed address (issue 13): it must find every node,
// hold a complete partition map that agrees with what the nodes claim,
// send each request to the partition's master (the nodes' statistics show
// it: proxies under 1% of requests, each node serving the writes of the
// partitions it masters), and batch, scan and partition queries across the
// cluster must return every record exactly once.
//
// tests/go/cluster.sh starts the cluster (tests/python/with_cluster.py) and
// runs `go test` here with BOLIDE_SEED_HOST, BOLIDE_SEED_PORT,
// BOLIDE_CLUSTER_NAME and BOLIDE_CLUSTER_SIZE set.
package cluster

import (
	"encoding/base64"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
)

const (
	ns         = "test"
	partitions = 4096
	records    = 3000
	rf         = 2
)

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run this through tests/go/cluster.sh", name)
	}
	return v
}

func parseKV(text string) map[string]string {
	out := map[string]string{}
	for _, part := range strings.Split(strings.TrimSuffix(strings.TrimSpace(text), ";"), ";") {
		if k, v, ok := strings.Cut(part, "="); ok {
			out[k] = v
		}
	}
	return out
}

func info(t *testing.T, node *as.Node, command string) string {
	t.Helper()
	answer, err := node.RequestInfo(as.NewInfoPolicy(), command)
	if err != nil {
		t.Fatalf("info %q on %s: %v", command, node.GetName(), err)
	}
	v, ok := answer[command]
	if !ok {
		t.Fatalf("info %q on %s: no answer (%v)", command, node.GetName(), answer)
	}
	return v
}

// counter reads one numeric statistic.
func counter(t *testing.T, stats map[string]string, name string) int {
	t.Helper()
	v, ok := stats[name]
	if !ok {
		t.Fatalf("no statistic %q", name)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("statistic %s=%q is not a number", name, v)
	}
	return n
}

// claims parses a node's `replicas` answer for ns: one 4096-bit set per
// column (column 0: the partitions it masters).
func claims(t *testing.T, node *as.Node) [][]bool {
	t.Helper()
	answer := info(t, node, "replicas")
	for _, part := range strings.Split(answer, ";") {
		name, rest, _ := strings.Cut(part, ":")
		if name != ns {
			continue
		}
		fields := strings.Split(rest, ",")
		if len(fields) < 2 || fields[0] != "0" {
			t.Fatalf("replicas on %s: %q", node.GetName(), part)
		}
		count, err := strconv.Atoi(fields[1])
		if err != nil || count != len(fields)-2 {
			t.Fatalf("replicas on %s: %q", node.GetName(), part)
		}
		out := make([][]bool, count)
		for c, column := range fields[2:] {
			bitmap, err := base64.StdEncoding.DecodeString(column)
			if err != nil || len(bitmap) != partitions/8 {
				t.Fatalf("replicas on %s, column %d: %v (%d bytes)", node.GetName(), c, err, len(bitmap))
			}
			out[c] = make([]bool, partitions)
			for p := range partitions {
				out[c][p] = bitmap[p>>3]&(0x80>>(p&7)) != 0
			}
		}
		return out
	}
	t.Fatalf("replicas on %s: no namespace %s in %q", node.GetName(), ns, answer)
	return nil
}

// snapshot is what one node counted so far.
type snapshot struct {
	writes, reads, proxies, fromProxies, masters, proles int
}

func snap(t *testing.T, node *as.Node) snapshot {
	t.Helper()
	service := parseKV(info(t, node, "statistics"))
	namespace := parseKV(info(t, node, "namespace/"+ns))
	return snapshot{
		writes: counter(t, namespace, "client_write_success") + counter(t, namespace, "client_write_error"),
		reads: counter(t, namespace, "client_read_success") + counter(t, namespace, "client_read_not_found") +
			counter(t, namespace, "client_read_error"),
		proxies: counter(t, service, "client_proxy_complete") + counter(t, service, "client_proxy_error") +
			counter(t, service, "client_proxy_timeout"),
		fromProxies: counter(t, service, "from_proxy_complete") + counter(t, service, "from_proxy_redirect"),
		masters:     counter(t, namespace, "master_objects"),
		proles:      counter(t, namespace, "prole_objects"),
	}
}

func TestThreeNodesFromOneSeed(t *testing.T) {
	host := env(t, "BOLIDE_SEED_HOST")
	port, err := strconv.Atoi(env(t, "BOLIDE_SEED_PORT"))
	if err != nil {
		t.Fatalf("BOLIDE_SEED_PORT: %v", err)
	}
	size, err := strconv.Atoi(env(t, "BOLIDE_CLUSTER_SIZE"))
	if err != nil || size < 2 {
		t.Fatalf("BOLIDE_CLUSTER_SIZE: %v", err)
	}

	// ---------------------------------------------------------- discovery
	policy := as.NewClientPolicy()
	policy.ClusterName = env(t, "BOLIDE_CLUSTER_NAME")
	policy.Timeout = 10 * time.Second
	client, aerr := as.NewClientWithPolicyAndHost(policy, as.NewHost(host, port))
	if aerr != nil {
		t.Fatalf("connect to the seed %s:%d: %v", host, port, aerr)
	}
	defer client.Close()
	deadline := time.Now().Add(15 * time.Second)
	for len(client.GetNodes()) != size || client.Cluster().Healthy() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("after 15 s the client sees %d nodes (want %d); partition map: %v",
				len(client.GetNodes()), size, client.Cluster().Healthy())
		}
		time.Sleep(100 * time.Millisecond)
	}
	nodes := client.GetNodes()
	names := map[string]*as.Node{}
	for _, node := range nodes {
		names[node.GetName()] = node
	}
	if len(names) != size {
		t.Fatalf("node names %v are not %d distinct names", names, size)
	}

	// ------------------------------------------- the map the nodes claim
	// Every partition is claimed exactly once per column, and the client's
	// map sends each key's write to the node claiming its column 0.
	masterOf := make([]string, partitions)
	for _, node := range nodes {
		columns := claims(t, node)
		if len(columns) != rf {
			t.Fatalf("%s claims %d columns, want %d", node.GetName(), len(columns), rf)
		}
		for c, column := range columns {
			for p, claimed := range column {
				if !claimed {
					continue
				}
				if c == 0 {
					if masterOf[p] != "" {
						t.Fatalf("partition %d has two masters: %s and %s", p, masterOf[p], node.GetName())
					}
					masterOf[p] = node.GetName()
				}
			}
		}
	}
	masteredBy := map[string]int{}
	for p, name := range masterOf {
		if name == "" {
			t.Fatalf("partition %d has no master", p)
		}
		masteredBy[name]++
	}
	for name, n := range masteredBy {
		// An even spread is 4096/3 = 1365 each.
		if n < partitions/size/2 {
			t.Fatalf("%s masters only %d partitions: %v", name, n, masteredBy)
		}
	}
	t.Logf("%d nodes from seed %s:%d; partitions mastered: %v", size, host, port, masteredBy)

	before := map[string]snapshot{}
	for name, node := range names {
		before[name] = snap(t, node)
	}

	// ---------------------------------------------------------- put / get
	set := "go_cluster_" + strconv.FormatInt(time.Now().UnixNano()%1_000_000_000, 36)
	keys := make([]*as.Key, records)
	expected := map[string]int{} // records each node masters
	write := as.NewWritePolicy(0, 0)
	write.SendKey = true
	write.TotalTimeout = 5 * time.Second
	for i := range keys {
		key, err := as.NewKey(ns, set, i)
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = key
		owner := masterOf[key.PartitionId()]
		expected[owner]++
		partition, perr := as.PartitionForWrite(client.Cluster(), &write.BasePolicy, key)
		if perr != nil {
			t.Fatalf("PartitionForWrite: %v", perr)
		}
		routed, rerr := partition.GetNodeWrite(client.Cluster())
		if rerr != nil || routed.GetName() != owner {
			t.Fatalf("key %d (partition %d): the client would write to %v (%v), the master is %s",
				i, key.PartitionId(), routed, rerr, owner)
		}
		if err := client.Put(write, key, as.BinMap{"i": i, "s": fmt.Sprintf("value-%d", i)}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	read := as.NewPolicy()
	read.TotalTimeout = 5 * time.Second
	for i, key := range keys {
		rec, err := client.Get(read, key)
		if err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		if rec.Bins["i"] != i || rec.Bins["s"] != fmt.Sprintf("value-%d", i) || rec.Generation != 1 {
			t.Fatalf("get %d: %v (generation %d)", i, rec.Bins, rec.Generation)
		}
	}

	// ---------------------------------------------------------- batch
	batch := as.NewBatchPolicy()
	batch.TotalTimeout = 15 * time.Second
	got, err := client.BatchGet(batch, keys)
	if err != nil {
		t.Fatalf("BatchGet: %v", err)
	}
	if len(got) != records {
		t.Fatalf("BatchGet: %d records for %d keys", len(got), records)
	}
	for i, rec := range got {
		if rec == nil {
			t.Fatalf("BatchGet: no record for key %d", i)
		}
		if rec.Bins["i"] != i || rec.Bins["s"] != fmt.Sprintf("value-%d", i) {
			t.Fatalf("BatchGet record %d: %v", i, rec.Bins)
		}
	}

	// ---------------------------------------------------------- scan
	scanPolicy := as.NewScanPolicy()
	scanPolicy.TotalTimeout = 60 * time.Second
	collect := func(what string, rs *as.Recordset, err error) map[int]int {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		seen := map[int]int{}
		for res := range rs.Results() {
			if res.Err != nil {
				t.Fatalf("%s: %v", what, res.Err)
			}
			i, ok := res.Record.Bins["i"].(int)
			if !ok || res.Record.Bins["s"] != fmt.Sprintf("value-%d", i) {
				t.Fatalf("%s: record %v", what, res.Record.Bins)
			}
			if res.Record.Key.Value() == nil || res.Record.Key.Value().String() != strconv.Itoa(i) {
				t.Fatalf("%s: record %d carries the stored key %v", what, i, res.Record.Key.Value())
			}
			seen[i]++
		}
		return seen
	}
	// exactly checks that seen holds each index of want once.
	exactly := func(what string, seen map[int]int, want func(i int) bool) {
		t.Helper()
		n := 0
		for i := range records {
			if !want(i) {
				if seen[i] != 0 {
					t.Fatalf("%s: record %d (partition %d) is outside the filter", what, i, keys[i].PartitionId())
				}
				continue
			}
			n++
			if seen[i] != 1 {
				t.Fatalf("%s: record %d seen %d times", what, i, seen[i])
			}
		}
		if len(seen) != n {
			t.Fatalf("%s: %d distinct records, want %d", what, len(seen), n)
		}
	}
	rs, err := client.ScanAll(scanPolicy, ns, set)
	exactly("ScanAll", collect("ScanAll", rs, err), func(int) bool { return true })

	// A scan of the first quarter of the partitions, and a query (no
	// secondary index) of the two middle quarters, each by partition filter.
	rs, err = client.ScanPartitions(scanPolicy, as.NewPartitionFilterByRange(0, 1024), ns, set)
	exactly("ScanPartitions 0..1023", collect("ScanPartitions", rs, err),
		func(i int) bool { return keys[i].PartitionId() < 1024 })
	queryPolicy := as.NewQueryPolicy()
	queryPolicy.TotalTimeout = 60 * time.Second
	rs, err = client.QueryPartitions(queryPolicy, as.NewStatement(ns, set), as.NewPartitionFilterByRange(1024, 2048))
	exactly("QueryPartitions 1024..3071", collect("QueryPartitions", rs, err),
		func(i int) bool { p := keys[i].PartitionId(); return p >= 1024 && p < 3072 })

	// ---------------------------------------------------------- statistics
	// Every write reached the node mastering its partition; reads too (the
	// client's default replica policy reads masters first); no node had to
	// proxy more than 1% of the requests.
	var writes, reads, proxies, fromProxies, masters, proles int
	var report []string
	for name, node := range names {
		after := snap(t, node)
		d := snapshot{
			writes:      after.writes - before[name].writes,
			reads:       after.reads - before[name].reads,
			proxies:     after.proxies - before[name].proxies,
			fromProxies: after.fromProxies - before[name].fromProxies,
			masters:     after.masters - before[name].masters,
			proles:      after.proles - before[name].proles,
		}
		report = append(report, fmt.Sprintf("%s: writes %d (masters %d), reads %d, proxied %d, served for others %d, master objects +%d, replica objects +%d",
			name, d.writes, expected[name], d.reads, d.proxies, d.fromProxies, d.masters, d.proles))
		writes += d.writes
		reads += d.reads
		proxies += d.proxies
		fromProxies += d.fromProxies
		masters += d.masters
		proles += d.proles
		if d.writes < records/size/2 {
			t.Errorf("%s served only %d of %d writes", name, d.writes, records)
		}
		if d.writes != expected[name] {
			t.Errorf("%s served %d writes; it masters the partitions of %d of them", name, d.writes, expected[name])
		}
		if d.masters != expected[name] {
			t.Errorf("%s holds %d new master records, want %d", name, d.masters, expected[name])
		}
	}
	sort.Strings(report)
	t.Logf("per node:\n  %s", strings.Join(report, "\n  "))
	if writes != records {
		t.Errorf("the nodes counted %d writes, the client made %d", writes, records)
	}
	// Every get and every batch row is a read.
	if reads != 2*records {
		t.Errorf("the nodes counted %d reads, the client made %d gets and %d batch rows", reads, records, records)
	}
	if masters != records || proles != (rf-1)*records {
		t.Errorf("master objects +%d, replica objects +%d; want %d and %d", masters, proles, records, (rf-1)*records)
	}
	if requests := writes + reads; proxies*100 >= requests {
		t.Errorf("%d of %d requests were proxied (1%% or more)", proxies, requests)
	}
	if fromProxies != proxies {
		t.Errorf("%d requests proxied, %d served by proxy", proxies, fromProxies)
	}
}
