package bolide;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.aerospike.client.AerospikeClient;
import com.aerospike.client.Bin;
import com.aerospike.client.Host;
import com.aerospike.client.Info;
import com.aerospike.client.Key;
import com.aerospike.client.Record;
import com.aerospike.client.cluster.Node;
import com.aerospike.client.cluster.Partitions;
import com.aerospike.client.policy.ClientPolicy;
import com.aerospike.client.policy.Policy;
import com.aerospike.client.policy.Replica;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The official Java client with rack awareness against a 4-node, RF 2
 * cluster in two racks (A1, A2 on rack 1; A3, A4 on rack 2): every
 * partition's two copies sit on both racks, each node's {@code rack-ids}
 * names its rack, and a client with {@code rackAware}, {@code rackIds [R]}
 * and the {@code PREFER_RACK} replica policy reads every key from nodes of
 * rack R only: the nodes' own read counters ({@code client_read_success}
 * of {@code namespace/test}) grow on rack R by the number of reads and not
 * at all on the other rack.
 *
 * <p>tests/java/run.sh runs it against {@code with_cluster.py --nodes 4
 * --racks 1,1,2,2}, which sets BOLIDE_RACKS ({@code A1:1,A2:1,A3:2,A4:2}).
 */
class RackAwareTest {
    static final String NS = ThreeNodeClusterTest.NS;
    static final int PARTITIONS = ThreeNodeClusterTest.PARTITIONS;
    static final int RF = ThreeNodeClusterTest.RF;
    static final int READS = 600;

    /** BOLIDE_RACKS: node name to rack. */
    static Map<String, Integer> racks() {
        Map<String, Integer> out = new HashMap<>();
        for (String pair : ThreeNodeClusterTest.env("BOLIDE_RACKS").split(",")) {
            String[] parts = pair.split(":");
            assertEquals(2, parts.length, "BOLIDE_RACKS entry " + pair);
            out.put(parts[0], Integer.parseInt(parts[1]));
        }
        return out;
    }

    /** A client that prefers nodes of {@code rack} for reads. */
    static AerospikeClient rackClient(int rack) {
        ClientPolicy policy = new ClientPolicy();
        policy.clusterName = ThreeNodeClusterTest.env("BOLIDE_CLUSTER_NAME");
        policy.timeout = 10_000;
        policy.tendInterval = 250;
        policy.rackAware = true;
        policy.rackIds = List.of(rack);
        return new AerospikeClient(policy, new Host(ThreeNodeClusterTest.env("BOLIDE_SEED_HOST"),
            Integer.parseInt(ThreeNodeClusterTest.env("BOLIDE_SEED_PORT"))));
    }

    /** Until the client has every node, a complete map and each node's rack. */
    static void waitForRacks(AerospikeClient client, Map<String, Integer> racks) throws InterruptedException {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (true) {
            Node[] nodes = client.getNodes();
            Partitions map = client.getCluster().partitionMap.get(NS);
            boolean ready = nodes.length == racks.size() && map != null && map.replicas.length == RF;
            for (int c = 0; ready && c < RF; c++) {
                for (int p = 0; p < PARTITIONS; p++) {
                    if (map.replicas[c].get(p) == null) {
                        ready = false;
                        break;
                    }
                }
            }
            for (Node node : nodes) {
                ready = ready && node.hasRack(NS, racks.get(node.getName()));
            }
            if (ready) {
                return;
            }
            if (System.nanoTime() > deadline) {
                fail("after 20 s the client does not know every node's rack: " + nodes.length + " nodes");
            }
            Thread.sleep(100);
        }
    }

    static long reads(Node node) {
        String v = ThreeNodeClusterTest.parseKv(Info.request(node, "namespace/" + NS)).get("client_read_success");
        assertNotNull(v, "client_read_success on " + node.getName());
        return Long.parseLong(v);
    }

    @Test
    @Timeout(150)
    void readsStayOnTheClientsRack() throws Exception {
        Map<String, Integer> racks = racks();
        try (AerospikeClient one = rackClient(1); AerospikeClient two = rackClient(2)) {
            waitForRacks(one, racks);
            waitForRacks(two, racks);
            Node[] nodes = one.getNodes();

            // Each node names its rack; the racks answer groups them.
            for (Node node : nodes) {
                assertEquals(NS + ":" + racks.get(node.getName()), Info.request(node, "rack-ids"),
                    "rack-ids on " + node.getName());
                assertEquals("ns=test:rack_1=A2,A1:rack_2=A4,A3", Info.request(node, "racks:"),
                    "racks: on " + node.getName());
            }

            // Every partition's two copies are on the two racks.
            String[][] holder = new String[RF][PARTITIONS];
            for (Node node : nodes) {
                boolean[][] columns = ThreeNodeClusterTest.claims(node);
                assertEquals(RF, columns.length, node.getName() + " columns");
                for (int c = 0; c < RF; c++) {
                    for (int p = 0; p < PARTITIONS; p++) {
                        if (columns[c][p]) {
                            assertEquals(null, holder[c][p], "partition " + p + " column " + c + " claimed twice");
                            holder[c][p] = node.getName();
                        }
                    }
                }
            }
            for (int p = 0; p < PARTITIONS; p++) {
                assertNotNull(holder[0][p], "partition " + p + " has no master");
                assertNotNull(holder[1][p], "partition " + p + " has no replica");
                assertNotEquals(racks.get(holder[0][p]), racks.get(holder[1][p]),
                    "partition " + p + ": both copies on one rack (" + holder[0][p] + ", " + holder[1][p] + ")");
            }

            Key[] keys = new Key[READS];
            String set = "java_rack_" + Long.toString(System.nanoTime() % 1_000_000_000L, 36);
            for (int i = 0; i < READS; i++) {
                keys[i] = new Key(NS, set, i);
                one.put(null, keys[i], new Bin("v", i));
            }

            Policy prefer = new Policy();
            prefer.replica = Replica.PREFER_RACK;
            for (int rack : new int[] {1, 2}) {
                AerospikeClient reader = rack == 1 ? one : two;
                Map<String, Long> before = new HashMap<>();
                for (Node node : nodes) {
                    before.put(node.getName(), reads(node));
                }
                for (int i = 0; i < READS; i++) {
                    Record record = reader.get(prefer, keys[i]);
                    assertNotNull(record, "rack " + rack + ": key " + i);
                    assertEquals(i, record.getInt("v"), "rack " + rack + ": key " + i);
                }
                Map<String, Long> grew = new HashMap<>();
                long local = 0;
                for (Node node : nodes) {
                    grew.put(node.getName(), reads(node) - before.get(node.getName()));
                }
                for (Map.Entry<String, Long> e : grew.entrySet()) {
                    if (racks.get(e.getKey()) == rack) {
                        local += e.getValue();
                        assertTrue(e.getValue() > READS / 5, "rack " + rack + ": " + e.getKey()
                            + " served few reads: " + grew);
                    } else {
                        assertEquals(0L, e.getValue().longValue(), "rack " + rack + ": " + e.getKey()
                            + " on the other rack served reads: " + grew);
                    }
                }
                assertEquals(READS, local, "rack " + rack + ": reads served on the rack: " + grew);
                System.out.println("rack " + rack + " client: reads per node " + grew);
            }
        }
    }
}
