//! Batch and scan through the official Aerospike Rust client against a real
//! bolided (issue 5).

use aerospike::{
    as_bin, operations, BatchDeletePolicy, BatchOperation, BatchPolicy, BatchReadPolicy,
    BatchWritePolicy, Bins, PartitionFilter, QueryPolicy, ResultCode, Statement, Value,
};
use bolide_client_tests::{key, wpolicy, BolideServer};
use futures::StreamExt;

const SET: &str = "batchscan";

async fn load(client: &aerospike::Client, count: i64) {
    for i in 0..count {
        let k = key(SET, &format!("k{i}"));
        client
            .put(
                &wpolicy(),
                &k,
                &[as_bin!("i", i), as_bin!("s", format!("v{i}"))],
            )
            .await
            .expect("put");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_reads_every_key_and_reports_missing_ones() {
    let server = BolideServer::start();
    let client = server.client().await;
    load(&client, 50).await;
    let read_policy = BatchReadPolicy::default();
    let mut ops: Vec<BatchOperation> = (0..50)
        .map(|i| BatchOperation::read(&read_policy, key(SET, &format!("k{i}")), Bins::All))
        .collect();
    ops.push(BatchOperation::read(
        &read_policy,
        key(SET, "missing"),
        Bins::All,
    ));
    ops.push(BatchOperation::read(
        &read_policy,
        key(SET, "k7"),
        Bins::from(["s"]),
    ));
    client
        .batch(&BatchPolicy::default(), &mut ops)
        .await
        .expect("batch");
    for (i, op) in ops.iter().take(50).enumerate() {
        let record = op.record().unwrap_or_else(|| panic!("row {i} missing"));
        assert_eq!(record.bins.get("i"), Some(&Value::from(i as i64)));
        assert_eq!(record.bins.get("s"), Some(&Value::from(format!("v{i}"))));
        assert_eq!(record.generation, 1);
    }
    assert!(ops[50].record().is_none());
    assert_eq!(ops[50].result_code(), Some(ResultCode::KeyNotFoundError));
    let named = ops[51].record().expect("named bins row");
    assert_eq!(named.bins.len(), 1);
    assert_eq!(named.bins.get("s"), Some(&Value::from("v7")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_writes_and_deletes() {
    let server = BolideServer::start();
    let client = server.client().await;
    load(&client, 5).await;
    let write_policy = BatchWritePolicy::default();
    let delete_policy = BatchDeletePolicy::default();
    let mut ops = vec![
        BatchOperation::write(
            &write_policy,
            key(SET, "new"),
            vec![operations::put(&as_bin!("w", 1))],
        ),
        BatchOperation::write(
            &write_policy,
            key(SET, "k1"),
            vec![operations::add(&as_bin!("i", 10)), operations::get_bin("i")],
        ),
        BatchOperation::delete(&delete_policy, key(SET, "k2")),
        BatchOperation::delete(&delete_policy, key(SET, "never-there")),
    ];
    client
        .batch(&BatchPolicy::default(), &mut ops)
        .await
        .expect("batch");
    assert_eq!(ops[0].result_code(), Some(ResultCode::Ok));
    // Operate with a write answers every op (respond-all-ops): the add gives
    // nil, the read the new value; the client folds both into one bin.
    assert_eq!(
        ops[1].record().and_then(|r| r.bins.get("i").cloned()),
        Some(Value::MultiResult(vec![Value::Nil, Value::from(11i64)]))
    );
    assert_eq!(ops[2].result_code(), Some(ResultCode::Ok));
    assert_eq!(ops[3].result_code(), Some(ResultCode::KeyNotFoundError));
    let new = client
        .get(
            &aerospike::ReadPolicy::default(),
            &key(SET, "new"),
            Bins::All,
        )
        .await
        .expect("new record");
    assert_eq!(new.bins.get("w"), Some(&Value::from(1i64)));
    let gone = client
        .get(
            &aerospike::ReadPolicy::default(),
            &key(SET, "k2"),
            Bins::All,
        )
        .await;
    assert!(gone.is_err(), "deleted record still readable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_streams_every_record_of_a_set_with_selected_bins() {
    let server = BolideServer::start();
    let client = server.client().await;
    load(&client, 300).await;
    client
        .put(&wpolicy(), &key("other", "x"), &[as_bin!("i", -1)])
        .await
        .expect("put other");
    let statement = Statement::new("test", SET, Bins::from(["i"]));
    let recordset = client
        .query(&QueryPolicy::default(), PartitionFilter::all(), statement)
        .await
        .expect("query");
    let mut stream = recordset.into_stream();
    let mut seen = Vec::new();
    while let Some(record) = stream.next().await {
        let record = record.expect("record");
        assert_eq!(record.bins.len(), 1, "only the selected bin");
        match record.bins.get("i") {
            Some(Value::Int(i)) => seen.push(*i),
            other => panic!("unexpected bin value {other:?}"),
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..300).collect::<Vec<i64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_of_a_partition_range_and_max_records() {
    let server = BolideServer::start();
    let client = server.client().await;
    load(&client, 200).await;
    let mut total = 0;
    for (begin, count) in [(0, 2048), (2048, 2048)] {
        let statement = Statement::new("test", SET, Bins::All);
        let filter = PartitionFilter::by_range(begin, count);
        let recordset = client
            .query(&QueryPolicy::default(), filter, statement)
            .await
            .expect("query");
        let mut stream = recordset.into_stream();
        while let Some(record) = stream.next().await {
            record.expect("record");
            total += 1;
        }
    }
    assert_eq!(total, 200);
    let policy = QueryPolicy {
        max_records: 50,
        ..QueryPolicy::default()
    };
    let statement = Statement::new("test", SET, Bins::All);
    let recordset = client
        .query(&policy, PartitionFilter::all(), statement)
        .await
        .expect("query");
    let mut stream = recordset.into_stream();
    let mut limited = 0;
    while let Some(record) = stream.next().await {
        record.expect("record");
        limited += 1;
    }
    assert_eq!(limited, 50);
}
