package bolide;

import static org.junit.jupiter.api.Assertions.assertEquals;
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
import com.aerospike.client.cluster.Partition;
import com.aerospike.client.cluster.Partitions;
import com.aerospike.client.policy.BatchPolicy;
import com.aerospike.client.policy.ClientPolicy;
import com.aerospike.client.policy.Policy;
import com.aerospike.client.policy.QueryPolicy;
import com.aerospike.client.policy.ScanPolicy;
import com.aerospike.client.policy.WritePolicy;
import com.aerospike.client.query.PartitionFilter;
import com.aerospike.client.query.RecordSet;
import com.aerospike.client.query.Statement;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.IntPredicate;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The official Java client against a 3-node, RF 2 cluster of real bolided
 * processes, given one seed address (issue 13): it finds every node and a
 * complete partition map that agrees with what the nodes claim, puts and
 * gets 3000 records, batch-reads, scans and queries them (each exactly
 * once), and the nodes' statistics show every request served by the
 * partition's master (each node counted exactly the writes of the
 * partitions it claims; proxies under 1%).
 *
 * <p>tests/java/run.sh starts the cluster (tests/python/with_cluster.py) and
 * runs {@code mvn test} with BOLIDE_SEED_HOST, BOLIDE_SEED_PORT,
 * BOLIDE_CLUSTER_NAME and BOLIDE_CLUSTER_SIZE set.
 */
class ThreeNodeClusterTest {
    static final String NS = "test";
    static final int PARTITIONS = 4096;
    static final int RECORDS = 3000;
    static final int RF = 2;

    static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            fail(name + " is not set: run this through tests/java/run.sh");
        }
        return v;
    }

    static Map<String, String> parseKv(String text) {
        Map<String, String> out = new HashMap<>();
        for (String part : text.trim().split(";")) {
            int eq = part.indexOf('=');
            if (eq > 0) {
                out.put(part.substring(0, eq), part.substring(eq + 1));
            }
        }
        return out;
    }

    /** One node's replicas claims for NS: a 4096-entry array per column. */
    static boolean[][] claims(Node node) {
        String answer = Info.request(node, "replicas");
        for (String part : answer.split(";")) {
            int colon = part.indexOf(':');
            if (colon < 0 || !part.substring(0, colon).equals(NS)) {
                continue;
            }
            String[] fields = part.substring(colon + 1).split(",");
            assertEquals("0", fields[0], "AP regime: " + part);
            int count = Integer.parseInt(fields[1]);
            assertEquals(count, fields.length - 2, part);
            boolean[][] out = new boolean[count][PARTITIONS];
            for (int c = 0; c < count; c++) {
                byte[] bitmap = Base64.getDecoder().decode(fields[2 + c]);
                assertEquals(PARTITIONS / 8, bitmap.length, "bitmap length");
                for (int p = 0; p < PARTITIONS; p++) {
                    out[c][p] = (bitmap[p >> 3] & (0x80 >> (p & 7))) != 0;
                }
            }
            return out;
        }
        fail("no namespace " + NS + " in replicas " + answer);
        return null;
    }

    /** What one node counted so far. */
    record Counts(long writes, long reads, long proxies, long masters, long proles) {
        Counts minus(Counts o) {
            return new Counts(writes - o.writes, reads - o.reads, proxies - o.proxies,
                masters - o.masters, proles - o.proles);
        }
    }

    static long stat(Map<String, String> stats, String name, Node node) {
        String v = stats.get(name);
        assertNotNull(v, "no statistic " + name + " on " + node.getName());
        return Long.parseLong(v);
    }

    static Counts counts(Node node) {
        Map<String, String> service = parseKv(Info.request(node, "statistics"));
        Map<String, String> ns = parseKv(Info.request(node, "namespace/" + NS));
        return new Counts(
            stat(ns, "client_write_success", node) + stat(ns, "client_write_error", node),
            stat(ns, "client_read_success", node) + stat(ns, "client_read_not_found", node)
                + stat(ns, "client_read_error", node),
            stat(service, "client_proxy_complete", node) + stat(service, "client_proxy_error", node)
                + stat(service, "client_proxy_timeout", node),
            stat(ns, "master_objects", node),
            stat(ns, "prole_objects", node));
    }

    static void exactly(String what, Map<Integer, Integer> seen, Key[] keys, IntPredicate wanted) {
        int n = 0;
        for (int i = 0; i < keys.length; i++) {
            int times = seen.getOrDefault(i, 0);
            if (wanted.test(Partition.getPartitionId(keys[i].digest))) {
                n++;
                assertEquals(1, times, what + ": record " + i + " seen " + times + " times");
            } else {
                assertEquals(0, times, what + ": record " + i + " is outside the filter");
            }
        }
        assertEquals(n, seen.size(), what + ": distinct records");
    }

    /** Checks a scanned record and counts it. */
    static void count(String what, Map<Integer, Integer> seen, Key key, Record record) {
        int i = record.getInt("i");
        assertEquals("value-" + i, record.getString("s"), what + ": record " + i);
        assertNotNull(key.userKey, what + ": record " + i + " without its stored key");
        assertEquals(i, key.userKey.toInteger(), what + ": stored key of record " + i);
        seen.merge(i, 1, Integer::sum);
    }

    @Test
    @Timeout(240)
    void threeNodesRf2FromOneSeed() throws Exception {
        String host = env("BOLIDE_SEED_HOST");
        int port = Integer.parseInt(env("BOLIDE_SEED_PORT"));
        int size = Integer.parseInt(env("BOLIDE_CLUSTER_SIZE"));

        ClientPolicy policy = new ClientPolicy();
        policy.clusterName = env("BOLIDE_CLUSTER_NAME");
        policy.timeout = 10_000;
        try (AerospikeClient client = new AerospikeClient(policy, new Host(host, port))) {
            // ------------------------------------------------------ discovery
            long deadline = System.nanoTime() + 15_000_000_000L;
            while (true) {
                Partitions map = client.getCluster().partitionMap.get(NS);
                boolean complete = map != null && map.replicas.length == RF;
                for (int c = 0; complete && c < RF; c++) {
                    for (int p = 0; p < PARTITIONS; p++) {
                        if (map.replicas[c].get(p) == null) {
                            complete = false;
                            break;
                        }
                    }
                }
                if (client.getNodes().length == size && complete) {
                    break;
                }
                if (System.nanoTime() > deadline) {
                    fail("after 15 s the client sees " + client.getNodes().length + " nodes (want " + size
                        + "), complete map: " + complete);
                }
                Thread.sleep(100);
            }
            Node[] nodes = client.getNodes();
            Map<String, Node> byName = new TreeMap<>();
            for (Node node : nodes) {
                byName.put(node.getName(), node);
            }
            assertEquals(size, byName.size(), "distinct node names " + byName.keySet());

            // ------------------------------- the map the nodes claim = the client's
            String[][] owner = new String[RF][PARTITIONS];
            for (Node node : nodes) {
                boolean[][] columns = claims(node);
                assertEquals(RF, columns.length, node.getName() + " columns");
                for (int c = 0; c < RF; c++) {
                    for (int p = 0; p < PARTITIONS; p++) {
                        if (columns[c][p]) {
                            if (owner[c][p] != null) {
                                fail("partition " + p + " column " + c + " claimed by " + owner[c][p] + " and "
                                    + node.getName());
                            }
                            owner[c][p] = node.getName();
                        }
                    }
                }
            }
            Partitions map = client.getCluster().partitionMap.get(NS);
            Map<String, Integer> mastered = new TreeMap<>();
            for (int c = 0; c < RF; c++) {
                for (int p = 0; p < PARTITIONS; p++) {
                    assertNotNull(owner[c][p], "partition " + p + " column " + c + " claimed by no node");
                    assertEquals(owner[c][p], map.replicas[c].get(p).getName(),
                        "the client's map, partition " + p + " column " + c);
                }
            }
            for (int p = 0; p < PARTITIONS; p++) {
                mastered.merge(owner[0][p], 1, Integer::sum);
            }
            for (String name : byName.keySet()) {
                int n = mastered.getOrDefault(name, 0);
                assertTrue(n >= PARTITIONS / size / 2, name + " masters " + n + " partitions: " + mastered);
            }

            Map<String, Counts> before = new HashMap<>();
            for (Node node : nodes) {
                before.put(node.getName(), counts(node));
            }

            // ------------------------------------------------------ put / get
            String set = "java_cluster_" + Long.toString(System.nanoTime() % 1_000_000_000L, 36);
            Key[] keys = new Key[RECORDS];
            Map<String, Integer> expected = new TreeMap<>();
            WritePolicy write = new WritePolicy();
            write.sendKey = true;
            write.totalTimeout = 5000;
            for (int i = 0; i < RECORDS; i++) {
                keys[i] = new Key(NS, set, i);
                String master = owner[0][Partition.getPartitionId(keys[i].digest)];
                expected.merge(master, 1, Integer::sum);
                Node routed = Partition.write(client.getCluster(), write, keys[i]).getNodeWrite(client.getCluster());
                assertEquals(master, routed.getName(), "the client's node for key " + i);
                client.put(write, keys[i], new Bin("i", i), new Bin("s", "value-" + i));
            }
            Policy read = new Policy();
            read.totalTimeout = 5000;
            for (int i = 0; i < RECORDS; i++) {
                Record record = client.get(read, keys[i]);
                assertNotNull(record, "get " + i);
                assertEquals(i, record.getInt("i"), "get " + i);
                assertEquals("value-" + i, record.getString("s"), "get " + i);
                assertEquals(1, record.generation, "get " + i);
            }

            // ------------------------------------------------------ batch
            BatchPolicy batch = new BatchPolicy();
            batch.totalTimeout = 15_000;
            Record[] records = client.get(batch, keys);
            assertEquals(RECORDS, records.length);
            for (int i = 0; i < RECORDS; i++) {
                assertNotNull(records[i], "batch row " + i);
                assertEquals(i, records[i].getInt("i"), "batch row " + i);
                assertEquals("value-" + i, records[i].getString("s"), "batch row " + i);
            }

            // ------------------------------------------------------ scans, query
            ScanPolicy scanPolicy = new ScanPolicy();
            scanPolicy.totalTimeout = 60_000;
            Map<Integer, Integer> all = new ConcurrentHashMap<>();
            client.scanAll(scanPolicy, NS, set, (key, record) -> count("scanAll", all, key, record));
            exactly("scanAll", all, keys, p -> true);

            Map<Integer, Integer> quarter = new ConcurrentHashMap<>();
            client.scanPartitions(scanPolicy, PartitionFilter.range(0, 1024), NS, set,
                (key, record) -> count("scanPartitions", quarter, key, record));
            exactly("scanPartitions 0..1023", quarter, keys, p -> p < 1024);

            QueryPolicy queryPolicy = new QueryPolicy();
            queryPolicy.totalTimeout = 60_000;
            Map<Integer, Integer> middle = new HashMap<>();
            Statement statement = new Statement();
            statement.setNamespace(NS);
            statement.setSetName(set);
            try (RecordSet rs = client.queryPartitions(queryPolicy, statement, PartitionFilter.range(1024, 2048))) {
                while (rs.next()) {
                    count("queryPartitions", middle, rs.getKey(), rs.getRecord());
                }
            }
            exactly("queryPartitions 1024..3071", middle, keys, p -> p >= 1024 && p < 3072);

            // ------------------------------------------------------ statistics
            long writes = 0, reads = 0, proxies = 0, masters = 0, proles = 0;
            List<String> report = new ArrayList<>();
            for (Node node : nodes) {
                String name = node.getName();
                Counts d = counts(node).minus(before.get(name));
                report.add(name + ": " + d + ", masters of " + expected.get(name));
                writes += d.writes();
                reads += d.reads();
                proxies += d.proxies();
                masters += d.masters();
                proles += d.proles();
                assertEquals((long) expected.get(name), d.writes(),
                    name + " served writes; it masters the partitions of " + expected.get(name));
                assertTrue(d.writes() >= RECORDS / size / 2, name + ": " + d);
                assertEquals((long) expected.get(name), d.masters(), name + " new master records");
            }
            System.out.println("per node: " + report);
            assertEquals(RECORDS, writes, "writes counted: " + report);
            assertEquals(2L * RECORDS, reads, "gets and batch rows: " + report);
            assertEquals(RECORDS, masters, "master objects: " + report);
            assertEquals((long) (RF - 1) * RECORDS, proles, "replica objects: " + report);
            assertTrue(proxies * 100 < writes + reads,
                proxies + " of " + (writes + reads) + " requests proxied: " + report);
        }
    }
}
