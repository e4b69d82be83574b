//! The official Rust client against a 3-node, RF 2 cluster of real `bolided`
//! processes, given one seed address (issue 13): it finds every node and a
//! complete partition map, puts and gets 3000 records, batch-reads them and
//! scans them (each exactly once), and the nodes' statistics show every
//! request served by the partition's master: each node counted exactly the
//! writes of the partitions it claims as master, proxies stayed under 1%.

use std::collections::HashMap;
use std::time::Duration;

use aerospike::{
    as_bin, AdminPolicy, BatchOperation, BatchPolicy, BatchReadPolicy, Bins, Client, ClientPolicy,
    Key, PartitionFilter, QueryPolicy, Statement, Value,
};
use bolide_client_tests::cluster::{parse_kv, BolideCluster, MULTI_NODE_CLUSTER_NAME};
use bolide_client_tests::{rpolicy, wpolicy, NAMESPACE};
use futures::StreamExt;

const SIZE: usize = 3;
const RF: usize = 2;
const RECORDS: i64 = 3000;
const PARTITIONS: usize = 4096;

/// Standard base64 (with padding), enough for the `replicas` bitmaps.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c:?} in {text:?}"),
        }
    };
    let mut out = Vec::new();
    for chunk in text.as_bytes().chunks(4) {
        let pad = chunk.iter().filter(|&&c| c == b'=').count();
        let mut n = 0u32;
        for &c in chunk {
            n = (n << 6) | if c == b'=' { 0 } else { value(c) };
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..4 - pad]);
    }
    out
}

/// A node's `replicas` claims for the namespace: one 4096-bit set per column.
fn claims(answer: &str) -> Vec<Vec<bool>> {
    for part in answer.split(';') {
        let Some((name, rest)) = part.split_once(':') else {
            continue;
        };
        if name != NAMESPACE {
            continue;
        }
        let fields: Vec<&str> = rest.split(',').collect();
        assert_eq!(fields[0], "0", "AP regime expected: {part}");
        let count: usize = fields[1].parse().expect("column count");
        assert_eq!(count, fields.len() - 2, "{part}");
        return fields[2..]
            .iter()
            .map(|column| {
                let bitmap = base64_decode(column);
                assert_eq!(bitmap.len(), PARTITIONS / 8, "bitmap length");
                (0..PARTITIONS)
                    .map(|p| bitmap[p >> 3] & (0x80 >> (p & 7)) != 0)
                    .collect()
            })
            .collect();
    }
    panic!("no namespace {NAMESPACE} in replicas {answer:?}");
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    writes: i64,
    reads: i64,
    proxies: i64,
    masters: i64,
    proles: i64,
}

async fn counts(client: &Client, name: &str) -> Counts {
    let node = client.get_node(name).expect("node");
    let info = node
        .info(&AdminPolicy::default(), &["statistics", "namespace/test"])
        .await
        .expect("info statistics");
    let service = parse_kv(&info["statistics"]);
    let namespace = parse_kv(&info["namespace/test"]);
    let n = |map: &HashMap<String, String>, key: &str| -> i64 {
        map.get(key)
            .unwrap_or_else(|| panic!("no statistic {key} on {name}"))
            .parse()
            .unwrap_or_else(|_| panic!("statistic {key} on {name} is not a number"))
    };
    Counts {
        writes: n(&namespace, "client_write_success") + n(&namespace, "client_write_error"),
        reads: n(&namespace, "client_read_success")
            + n(&namespace, "client_read_not_found")
            + n(&namespace, "client_read_error"),
        proxies: n(&service, "client_proxy_complete")
            + n(&service, "client_proxy_error")
            + n(&service, "client_proxy_timeout"),
        masters: n(&namespace, "master_objects"),
        proles: n(&namespace, "prole_objects"),
    }
}

/// Every record of `set` in the partitions `filter` names, as `i` → times seen.
async fn scan(client: &Client, set: &str, filter: PartitionFilter) -> HashMap<i64, usize> {
    let policy = QueryPolicy {
        base_policy: aerospike::BasePolicy {
            total_timeout: 60_000,
            ..QueryPolicy::default().base_policy
        },
        ..QueryPolicy::default()
    };
    let recordset = client
        .query(&policy, filter, Statement::new(NAMESPACE, set, Bins::All))
        .await
        .expect("query");
    let mut stream = recordset.into_stream();
    let mut seen = HashMap::new();
    while let Some(record) = stream.next().await {
        let record = record.expect("scan record");
        let Some(Value::Int(i)) = record.bins.get("i").cloned() else {
            panic!("record without i: {record}");
        };
        assert_eq!(
            record.bins.get("s"),
            Some(&Value::from(format!("value-{i}")))
        );
        let user_key = record.key.as_ref().and_then(Key::user_key).cloned();
        assert_eq!(user_key, Some(Value::Int(i)), "stored key of record {i}");
        *seen.entry(i).or_default() += 1;
    }
    seen
}

fn assert_exactly(
    what: &str,
    seen: &HashMap<i64, usize>,
    keys: &[Key],
    want: impl Fn(usize) -> bool,
) {
    let mut n = 0;
    for (i, key) in keys.iter().enumerate() {
        let times = seen.get(&(i as i64)).copied().unwrap_or(0);
        if want(key.partition_id()) {
            n += 1;
            assert_eq!(times, 1, "{what}: record {i} seen {times} times");
        } else {
            assert_eq!(times, 0, "{what}: record {i} is outside the filter");
        }
    }
    assert_eq!(seen.len(), n, "{what}: distinct records");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_rf2_from_one_seed() {
    let cluster = BolideCluster::start(SIZE, RF as u32);
    let policy = ClientPolicy {
        cluster_name: Some(MULTI_NODE_CLUSTER_NAME.to_string()),
        ..ClientPolicy::default()
    };
    // The second node as the only seed (not the principal, A3, nor the
    // heartbeat seed, A1).
    let seed = cluster.seed(1);
    let client = tokio::time::timeout(Duration::from_secs(15), Client::new(&policy, &seed))
        .await
        .expect("Client::new within 15 s")
        .expect("connect to the seed");

    // ---------------------------------------------------------- discovery
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while client.nodes().len() != SIZE || !client.partition_map_complete() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "after 15 s the client sees {} nodes (want {SIZE}), complete map: {}",
            client.nodes().len(),
            client.partition_map_complete()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut names = client.node_names();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), SIZE, "distinct node names: {names:?}");

    // ------------------------------------------- the map the nodes claim
    let mut master_of = vec![String::new(); PARTITIONS];
    let mut claimed = vec![vec![0usize; PARTITIONS]; RF];
    for name in &names {
        let node = client.get_node(name).expect("node");
        let info = node
            .info(&AdminPolicy::default(), &["replicas"])
            .await
            .expect("info replicas");
        let columns = claims(&info["replicas"]);
        assert_eq!(columns.len(), RF, "{name} claims {} columns", columns.len());
        for (c, column) in columns.iter().enumerate() {
            for (p, &yes) in column.iter().enumerate() {
                if yes {
                    claimed[c][p] += 1;
                    if c == 0 {
                        master_of[p] = name.clone();
                    }
                }
            }
        }
    }
    for (c, column) in claimed.iter().enumerate() {
        let bad: Vec<usize> = (0..PARTITIONS).filter(|&p| column[p] != 1).collect();
        assert!(
            bad.is_empty(),
            "column {c}: partitions {:?} not claimed exactly once",
            &bad[..bad.len().min(10)]
        );
    }
    let mut mastered: HashMap<&str, usize> = HashMap::new();
    for name in &master_of {
        *mastered.entry(name.as_str()).or_default() += 1;
    }
    for name in &names {
        let n = mastered.get(name.as_str()).copied().unwrap_or(0);
        assert!(
            n >= PARTITIONS / SIZE / 2,
            "{name} masters {n} partitions: {mastered:?}"
        );
    }

    let mut before = HashMap::new();
    for name in &names {
        before.insert(name.clone(), counts(&client, name).await);
    }

    // ---------------------------------------------------------- put / get
    let set = format!("rust_cluster_{}", std::process::id());
    let keys: Vec<Key> = (0..RECORDS)
        .map(|i| Key::new(NAMESPACE, &set, Value::Int(i)).expect("key"))
        .collect();
    let mut expected: HashMap<String, i64> = HashMap::new();
    let mut write = wpolicy();
    write.send_key = true;
    for (i, key) in keys.iter().enumerate() {
        *expected
            .entry(master_of[key.partition_id()].clone())
            .or_default() += 1;
        client
            .put(
                &write,
                key,
                &[as_bin!("i", i as i64), as_bin!("s", format!("value-{i}"))],
            )
            .await
            .unwrap_or_else(|e| panic!("put {i}: {e}"));
    }
    for (i, key) in keys.iter().enumerate() {
        let record = client
            .get(&rpolicy(), key, Bins::All)
            .await
            .unwrap_or_else(|e| panic!("get {i}: {e}"));
        assert_eq!(record.bins.get("i"), Some(&Value::Int(i as i64)), "get {i}");
        assert_eq!(
            record.bins.get("s"),
            Some(&Value::from(format!("value-{i}"))),
            "get {i}"
        );
        assert_eq!(record.generation, 1, "get {i}");
    }

    // ---------------------------------------------------------- batch
    let read_policy = BatchReadPolicy::default();
    let mut ops: Vec<BatchOperation> = keys
        .iter()
        .map(|k| BatchOperation::read(&read_policy, k.clone(), Bins::All))
        .collect();
    let mut batch_policy = BatchPolicy::default();
    batch_policy.base_policy.total_timeout = 15_000;
    client.batch(&batch_policy, &mut ops).await.expect("batch");
    for (i, op) in ops.iter().enumerate() {
        let record = op
            .record()
            .unwrap_or_else(|| panic!("batch row {i}: no record ({:?})", op.result_code()));
        assert_eq!(
            record.bins.get("i"),
            Some(&Value::Int(i as i64)),
            "batch row {i}"
        );
        assert_eq!(
            record.bins.get("s"),
            Some(&Value::from(format!("value-{i}"))),
            "batch row {i}"
        );
    }

    // ---------------------------------------------------------- scans
    let all = scan(&client, &set, PartitionFilter::all()).await;
    assert_exactly("scan of every partition", &all, &keys, |_| true);
    let part = scan(&client, &set, PartitionFilter::by_range(1000, 1500)).await;
    assert_exactly("scan of partitions 1000..2499", &part, &keys, |p| {
        (1000..2500).contains(&p)
    });

    // ---------------------------------------------------------- statistics
    let mut total = Counts::default();
    let mut report = Vec::new();
    for name in &names {
        let after = counts(&client, name).await;
        let b = before[name];
        let d = Counts {
            writes: after.writes - b.writes,
            reads: after.reads - b.reads,
            proxies: after.proxies - b.proxies,
            masters: after.masters - b.masters,
            proles: after.proles - b.proles,
        };
        report.push(format!("{name}: {d:?}, masters of {}", expected[name]));
        total.writes += d.writes;
        total.reads += d.reads;
        total.proxies += d.proxies;
        total.masters += d.masters;
        total.proles += d.proles;
        assert_eq!(
            d.writes, expected[name],
            "{name} served {} writes; it masters the partitions of {}",
            d.writes, expected[name]
        );
        assert!(d.writes >= RECORDS / SIZE as i64 / 2, "{name}: {d:?}");
        assert_eq!(d.masters, expected[name], "{name} new master records");
    }
    eprintln!("per node: {report:#?}");
    assert_eq!(total.writes, RECORDS, "writes counted: {report:?}");
    assert_eq!(total.reads, 2 * RECORDS, "gets and batch rows: {report:?}");
    assert_eq!(total.masters, RECORDS, "{report:?}");
    assert_eq!(total.proles, (RF as i64 - 1) * RECORDS, "{report:?}");
    assert!(
        total.proxies * 100 < total.writes + total.reads,
        "{} of {} requests proxied: {report:?}",
        total.proxies,
        total.writes + total.reads
    );
    client.close().await.expect("close");
}
