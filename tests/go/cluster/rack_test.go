// The official Go client with rack awareness against a 4-node, RF 2
// cluster in two racks (A1, A2 on rack 1; A3, A4 on rack 2): every
// partition's two copies sit on both racks, each node's `rack-ids` names
// its rack, and a client with RackAware, RackIds [R] and the PREFER_RACK
// replica policy reads every key from a node of rack R only: the nodes'
// own read counters (`client_read_success` of `namespace/test`) grow on
// rack R by the number of reads and not at all on the other rack.
//
// tests/go/cluster.sh runs it against `with_cluster.py --nodes 4 --racks
// 1,1,2,2`, which sets BOLIDE_RACKS (`A1:1,A2:1,A3:2,A4:2`).
package cluster

import (
	"strconv"
	"strings"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
)

// racksFromEnv reads BOLIDE_RACKS: node name -> rack.
func racksFromEnv(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, pair := range strings.Split(env(t, "BOLIDE_RACKS"), ",") {
		name, rack, ok := strings.Cut(pair, ":")
		n, err := strconv.Atoi(rack)
		if !ok || err != nil {
			t.Fatalf("BOLIDE_RACKS: bad entry %q", pair)
		}
		out[name] = n
	}
	return out
}

// rackClient connects a client that prefers nodes of `rack` for reads.
func rackClient(t *testing.T, rack int) *as.Client {
	t.Helper()
	host := env(t, "BOLIDE_SEED_HOST")
	port, err := strconv.Atoi(env(t, "BOLIDE_SEED_PORT"))
	if err != nil {
		t.Fatalf("BOLIDE_SEED_PORT: %v", err)
	}
	policy := as.NewClientPolicy()
	policy.ClusterName = env(t, "BOLIDE_CLUSTER_NAME")
	policy.Timeout = 10 * time.Second
	policy.RackAware = true
	policy.RackIds = []int{rack}
	policy.TendInterval = 250 * time.Millisecond
	client, aerr := as.NewClientWithPolicyAndHost(policy, as.NewHost(host, port))
	if aerr != nil {
		t.Fatalf("connect to the seed %s:%d: %v", host, port, aerr)
	}
	return client
}

// waitForRacks waits until the client sees every node, a complete map,
// and each node's rack (it reads `rack-ids` at every tend).
func waitForRacks(t *testing.T, client *as.Client, racks map[string]int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		nodes := client.GetNodes()
		known := len(nodes) == len(racks) && client.Cluster().Healthy() == nil
		for _, node := range nodes {
			rack, err := node.Rack(ns)
			known = known && err == nil && rack == racks[node.GetName()]
		}
		if known {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s the client does not know every node's rack (%d nodes, map %v)",
				len(nodes), client.Cluster().Healthy())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func reads(t *testing.T, node *as.Node) int {
	t.Helper()
	return counter(t, parseKV(info(t, node, "namespace/"+ns)), "client_read_success")
}

func TestRackAwareReadsStayOnTheClientsRack(t *testing.T) {
	racks := racksFromEnv(t)
	client := rackClient(t, 1)
	defer client.Close()
	waitForRacks(t, client, racks)
	nodes := client.GetNodes()

	// Each node names its own rack, and the racks answer groups them.
	for _, node := range nodes {
		want := ns + ":" + strconv.Itoa(racks[node.GetName()])
		if got := info(t, node, "rack-ids"); got != want {
			t.Fatalf("rack-ids on %s: %q, want %q", node.GetName(), got, want)
		}
		if got := info(t, node, "racks:"); got != "ns=test:rack_1=A2,A1:rack_2=A4,A3" {
			t.Fatalf("racks: on %s: %q", node.GetName(), got)
		}
	}

	// Every partition's master and replica are on different racks.
	holder := make([][]string, rf)
	for c := range holder {
		holder[c] = make([]string, partitions)
	}
	for _, node := range nodes {
		for c, column := range claims(t, node) {
			for p, claimed := range column {
				if claimed {
					if holder[c][p] != "" {
						t.Fatalf("partition %d column %d claimed by %s and %s", p, c, holder[c][p], node.GetName())
					}
					holder[c][p] = node.GetName()
				}
			}
		}
	}
	for p := range partitions {
		if holder[0][p] == "" || holder[1][p] == "" {
			t.Fatalf("partition %d: copies %q, %q", p, holder[0][p], holder[1][p])
		}
		if racks[holder[0][p]] == racks[holder[1][p]] {
			t.Fatalf("partition %d: both copies on rack %d (%s, %s)", p, racks[holder[0][p]], holder[0][p], holder[1][p])
		}
	}

	// Write with a plain client, then read from each rack.
	const count = 600
	set := "go_rack_" + strconv.FormatInt(time.Now().UnixNano()%1_000_000_000, 36)
	keys := make([]*as.Key, count)
	for i := range keys {
		key, err := as.NewKey(ns, set, i)
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = key
		if err := client.Put(nil, key, as.BinMap{"v": i}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	for _, rack := range []int{1, 2} {
		reader := client
		if rack != 1 {
			reader = rackClient(t, rack)
			defer reader.Close()
			waitForRacks(t, reader, racks)
		}
		before := map[string]int{}
		for _, node := range nodes {
			before[node.GetName()] = reads(t, node)
		}
		policy := as.NewPolicy()
		policy.ReplicaPolicy = as.PREFER_RACK
		for i, key := range keys {
			record, err := reader.Get(policy, key)
			if err != nil {
				t.Fatalf("rack %d: get %d: %v", rack, i, err)
			}
			if v, _ := record.Bins["v"].(int); v != i {
				t.Fatalf("rack %d: key %d read %v", rack, i, record.Bins)
			}
		}
		grew := map[string]int{}
		local := 0
		for _, node := range nodes {
			name := node.GetName()
			grew[name] = reads(t, node) - before[name]
			if racks[name] == rack {
				local += grew[name]
				if grew[name] < count/5 {
					t.Fatalf("rack %d: %s served only %d reads: %v", rack, name, grew[name], grew)
				}
			} else if grew[name] != 0 {
				t.Fatalf("rack %d: %s on rack %d served %d reads: %v", rack, name, racks[name], grew[name], grew)
			}
		}
		if local != count {
			t.Fatalf("rack %d: its nodes served %d reads, want %d: %v", rack, local, count, grew)
		}
		t.Logf("rack %d client: reads per node %v", rack, grew)
	}
}
