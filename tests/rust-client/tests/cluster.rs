//! Cluster discovery and tending by the official client, info commands,
//! unknown namespaces and concurrency.

use std::sync::Arc;
use std::time::Duration;

use aerospike::{as_bin, AdminPolicy, Bins, ClientPolicy, ErrorKind, Key, Value};
use bolide_client_tests::{key, rpolicy, wpolicy, BolideServer, CLUSTER_NAME, NAMESPACE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_connects_and_survives_tending() {
    let server = BolideServer::start();
    let client = server.client().await;
    assert!(client.is_connected());
    let nodes = client.nodes();
    assert_eq!(nodes.len(), 1, "exactly one node expected");
    let node_name = nodes[0].name().to_string();
    assert!(!node_name.is_empty());
    assert!(
        client.partition_map_complete(),
        "all 4096 partitions must be owned"
    );
    assert_eq!(client.is_strong_consistency(NAMESPACE), Some(false));
    assert_eq!(client.server_cluster_name().as_deref(), Some(CLUSTER_NAME));

    let k = key("cluster", "k");
    client
        .put(&wpolicy(), &k, &[as_bin!("a", 1i64)])
        .await
        .expect("put");

    // Let the tend loop (1 s interval) run at least twice.
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let nodes = client.nodes();
    assert_eq!(nodes.len(), 1, "still exactly one node after tending");
    let node = &nodes[0];
    assert_eq!(node.name(), node_name, "node name stable across tends");
    assert!(node.is_active(), "node still active");
    assert_eq!(node.failures(), 0, "tend failures against the node");
    assert!(
        node.refresh_count() >= 2,
        "tend must have refreshed the node at least twice, got {}",
        node.refresh_count()
    );
    assert!(
        node.partition_generation() >= 0,
        "partition generation known"
    );
    assert_eq!(node.peers_count(), 0, "single node has no peers");
    assert!(client.partition_map_complete());

    let rec = client
        .get(&rpolicy(), &k, Bins::All)
        .await
        .expect("get after tending");
    assert_eq!(rec.bins.get("a"), Some(&Value::Int(1)));
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_without_cluster_name_connects() {
    let server = BolideServer::start();
    let client = server.client_with(&ClientPolicy::default()).await;
    assert_eq!(client.nodes().len(), 1);
    assert_eq!(client.server_cluster_name().as_deref(), Some(CLUSTER_NAME));
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_cluster_name_is_rejected() {
    let server = BolideServer::start();
    let policy = ClientPolicy {
        cluster_name: Some("not-the-cluster".to_string()),
        ..ClientPolicy::default()
    };
    let res = tokio::time::timeout(
        Duration::from_secs(10),
        aerospike::Client::new(&policy, &server.hosts()),
    )
    .await
    .expect("Client::new must finish within 10 s");
    assert!(
        res.is_err(),
        "client must refuse a node with another cluster name"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_commands_used_by_the_client() {
    let server = BolideServer::start();
    let client = server.client().await;
    let p = AdminPolicy::default();
    let info = client
        .info(
            &p,
            &[
                "node",
                "cluster-name",
                "build",
                "partition-generation",
                "peers-generation",
                "peers-clear-std",
                "replicas",
            ],
        )
        .await
        .expect("info");

    let node = info.get("node").expect("node");
    assert_eq!(node, client.nodes()[0].name());
    assert_eq!(
        info.get("cluster-name").map(String::as_str),
        Some(CLUSTER_NAME)
    );

    let build = info.get("build").expect("build");
    let parts: Vec<u64> = build
        .split(|c: char| !c.is_ascii_digit())
        .take(4)
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("build {build:?} is not A.B.C.D"))
        })
        .collect();
    assert_eq!(
        parts.len(),
        4,
        "build {build:?} must have four numeric parts"
    );
    assert!(
        parts >= vec![4, 9, 0, 3],
        "build {build:?} must be >= 4.9.0.3 for this client"
    );

    let pgen: i64 = info["partition-generation"]
        .parse()
        .expect("partition-generation int");
    assert!(pgen >= 0);
    let peers_gen: i64 = info["peers-generation"]
        .parse()
        .expect("peers-generation int");
    assert!(peers_gen >= 0);
    // peers-clear-std: "<gen>,<default port>,[<peers>]" with no peers.
    let peers = &info["peers-clear-std"];
    let fields: Vec<&str> = peers.splitn(3, ',').collect();
    assert_eq!(fields.len(), 3, "peers-clear-std {peers:?}");
    assert_eq!(
        fields[0],
        peers_gen.to_string(),
        "peers-clear-std {peers:?} must carry the peers-generation"
    );
    assert!(
        fields[1].parse::<u16>().is_ok(),
        "peers-clear-std {peers:?}: default port must be numeric"
    );
    assert_eq!(fields[2], "[]", "single node lists no peers: {peers:?}");
    // replicas: "<ns>:<regime>,<n replicas>,<base64 4096-bit bitmap>" — AP
    // regime 0, one column, this node owns every partition (682 '/' + "8=").
    let replicas = &info["replicas"];
    let expected = format!("{NAMESPACE}:0,1,{}8=", "/".repeat(682));
    assert_eq!(replicas, &expected, "replicas answer");
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_namespaces() {
    let server = BolideServer::start();
    let client = server.client().await;
    let info = client
        .info(&AdminPolicy::default(), &["namespaces"])
        .await
        .expect("info");
    let ns = info.get("namespaces").expect("namespaces answered");
    assert_eq!(ns.split(';').collect::<Vec<_>>(), vec![NAMESPACE]);
    client.close().await.unwrap();
}

/// The client routes by its partition map, so an unknown namespace never
/// reaches the server: it fails locally with `ErrorKind::InvalidNamespace`
/// (result code 20, `server_result_code()` None).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_namespace_is_an_error() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = Key::new("nosuchns", "s", Value::from("k")).unwrap();

    let err = client
        .put(&wpolicy(), &k, &[as_bin!("a", 1i64)])
        .await
        .expect_err("put to unknown namespace must fail");
    assert!(
        matches!(err.kind(), ErrorKind::InvalidNamespace),
        "expected InvalidNamespace, got {:?}: {err}",
        err.kind()
    );
    assert_eq!(err.result_code(), 20);

    let err = client
        .get(&rpolicy(), &k, Bins::All)
        .await
        .expect_err("get from unknown namespace must fail");
    assert!(
        matches!(err.kind(), ErrorKind::InvalidNamespace),
        "{:?}",
        err.kind()
    );
    assert_eq!(err.result_code(), 20);

    // The known namespace keeps working.
    client
        .put(&wpolicy(), &key("ns", "ok"), &[as_bin!("a", 1i64)])
        .await
        .expect("put to test namespace");
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_tasks_put_and_get() {
    const TASKS: usize = 200;
    let server = BolideServer::start();
    let client = Arc::new(server.client().await);

    let mut wp = wpolicy();
    wp.base_policy.total_timeout = 10_000;
    let mut rp = rpolicy();
    rp.base_policy.total_timeout = 10_000;

    let mut handles = Vec::with_capacity(TASKS);
    for i in 0..TASKS {
        let client = client.clone();
        let wp = wp.clone();
        let rp = rp.clone();
        handles.push(tokio::spawn(async move {
            let k = key("conc", &format!("key-{i}"));
            let payload = format!("value-{i}-{}", "x".repeat(i));
            client
                .put(
                    &wp,
                    &k,
                    &[as_bin!("i", i as i64), as_bin!("s", payload.clone())],
                )
                .await
                .map_err(|e| format!("put {i}: {e}"))?;
            let rec = client
                .get(&rp, &k, Bins::All)
                .await
                .map_err(|e| format!("get {i}: {e}"))?;
            if rec.bins.get("i") != Some(&Value::Int(i as i64))
                || rec.bins.get("s") != Some(&Value::from(payload))
                || rec.generation != 1
            {
                return Err(format!("task {i}: wrong record {rec}"));
            }
            Ok::<(), String>(())
        }));
    }

    let all = tokio::time::timeout(Duration::from_secs(30), async {
        let mut errors = Vec::new();
        for h in handles {
            match h.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(e) => errors.push(format!("join: {e}")),
            }
        }
        errors
    })
    .await
    .expect("200 concurrent put/get tasks must finish within 30 s");
    assert!(
        all.is_empty(),
        "{} of {TASKS} tasks failed: {:?}",
        all.len(),
        &all[..all.len().min(10)]
    );

    // Everything is readable afterwards.
    for i in (0..TASKS).step_by(37) {
        let rec = client
            .get(&rp, &key("conc", &format!("key-{i}")), ["i"])
            .await
            .unwrap();
        assert_eq!(rec.bins.get("i"), Some(&Value::Int(i as i64)));
    }
    client.close().await.unwrap();
}
