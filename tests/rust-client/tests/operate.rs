//! `Client::operate` with several scalar operations in one command.
//!
//! In aerospike 3.x, an operate that contains any write sets
//! RESPOND_ALL_OPS (unless it also has a get-all read), so the server must
//! answer one op per request op, in order: NULL for write ops (put, add,
//! append, prepend, delete), the value for reads. Touch is the exception:
//! the real server never answers it. `Record::results`
//! holds those answers positionally; `Record::bins` groups them by bin name
//! (several answers for one bin become `Value::MultiResult`).

use aerospike::{as_bin, operations, Bins, Expiration, ResultCode, Value};
use bolide_client_tests::{assert_server_error, key, rpolicy, ttl_secs, wpolicy, BolideServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operate_mixed_write_and_read_ops() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("op", "mixed");
    client
        .put(
            &wpolicy(),
            &k,
            &[
                as_bin!("n", 10i64),
                as_bin!("f", 1.25f64),
                as_bin!("s", "mid"),
            ],
        )
        .await
        .unwrap();

    let put_bin = as_bin!("p", "new");
    let add_int = as_bin!("n", 5i64);
    let add_float = as_bin!("f", 2.5f64);
    let app = as_bin!("s", "-end");
    let pre = as_bin!("s", "start-");
    let ops = [
        operations::put(&put_bin),   // 0
        operations::add(&add_int),   // 1
        operations::add(&add_float), // 2
        operations::append(&app),    // 3
        operations::prepend(&pre),   // 4
        operations::get_bin("n"),    // 5
        operations::get_bin("f"),    // 6
        operations::get_bin("s"),    // 7
        operations::get_bin("p"),    // 8
    ];
    let rec = client.operate(&wpolicy(), &k, &ops).await.expect("operate");
    assert_eq!(
        rec.generation, 2,
        "one operate = one write = one generation bump"
    );

    let results = rec
        .results
        .as_ref()
        .expect("operate populates positional results");
    assert_eq!(
        results.len(),
        ops.len(),
        "one result per op (RESPOND_ALL_OPS), got {results:?}"
    );
    for (i, r) in results.iter().enumerate().take(5) {
        assert!(r.is_nil(), "write op #{i} must answer NULL, got {r:?}");
    }
    assert_eq!(results[5], Value::Int(15));
    assert_eq!(results[6], Value::from(3.75f64));
    assert_eq!(results[7], Value::from("start-mid-end"));
    assert_eq!(results[8], Value::from("new"));

    // Bin view: a write op's NULL and the later read of the same bin merge.
    assert_eq!(
        rec.bins.get("n"),
        Some(&Value::MultiResult(vec![Value::Nil, Value::Int(15)]))
    );

    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.len(), 4, "bins: {:?}", rec.bins);
    assert_eq!(rec.bins.get("n"), Some(&Value::Int(15)));
    assert_eq!(rec.bins.get("f"), Some(&Value::from(3.75f64)));
    assert_eq!(rec.bins.get("s"), Some(&Value::from("start-mid-end")));
    assert_eq!(rec.bins.get("p"), Some(&Value::from("new")));
    assert_eq!(rec.generation, 2);
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operate_reads_see_writes_in_order() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("op", "order");
    client
        .put(&wpolicy(), &k, &[as_bin!("count", 10i64)])
        .await
        .unwrap();

    let ops = [
        operations::get_bin("count"),
        operations::add(&as_bin!("count", 5i64)),
        operations::get_bin("count"),
    ];
    let rec = client.operate(&wpolicy(), &k, &ops).await.unwrap();
    let results = rec.results.as_ref().expect("results");
    assert_eq!(results.len(), 3, "got {results:?}");
    assert_eq!(results[0], Value::Int(10));
    assert!(
        results[1].is_nil(),
        "add answers NULL, got {:?}",
        results[1]
    );
    assert_eq!(results[2], Value::Int(15));
    assert_eq!(
        rec.bins.get("count"),
        Some(&Value::MultiResult(vec![
            Value::Int(10),
            Value::Nil,
            Value::Int(15)
        ]))
    );

    // Under RESPOND_ALL_OPS a read of a missing bin answers NULL in its slot.
    let ops = [
        operations::get_bin("missing"),
        operations::put(&as_bin!("count", 15i64)),
        operations::get_bin("count"),
    ];
    let rec = client.operate(&wpolicy(), &k, &ops).await.unwrap();
    assert_eq!(
        rec.results,
        Some(vec![Value::Nil, Value::Nil, Value::Int(15)]),
        "missing-bin read keeps its slot"
    );
    assert_eq!(rec.generation, 3);

    // Read-only operate: no RESPOND_ALL_OPS, one answer per read.
    let ops = [operations::get_bin("count"), operations::get_bin("count")];
    let rec = client.operate(&wpolicy(), &k, &ops).await.unwrap();
    assert_eq!(
        rec.bins.get("count"),
        Some(&Value::MultiResult(vec![Value::Int(15), Value::Int(15)]))
    );
    assert_eq!(
        rec.generation, 3,
        "read-only operate does not bump generation"
    );

    // A write plus get-all: get-all disables RESPOND_ALL_OPS and returns
    // every bin after the writes.
    let ops = [
        operations::add(&as_bin!("count", 1i64)),
        operations::put(&as_bin!("other", "x")),
        operations::get(),
    ];
    let rec = client.operate(&wpolicy(), &k, &ops).await.unwrap();
    assert_eq!(
        rec.bins.get("count"),
        Some(&Value::Int(16)),
        "bins: {:?}",
        rec.bins
    );
    assert_eq!(rec.bins.get("other"), Some(&Value::from("x")));
    assert_eq!(rec.bins.len(), 2, "bins: {:?}", rec.bins);
    assert_eq!(rec.generation, 4);
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operate_touch_and_header() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("op", "touch");
    client
        .put(&wpolicy(), &k, &[as_bin!("a", "v")])
        .await
        .unwrap();

    let mut wp = wpolicy();
    wp.expiration = Expiration::Seconds(3000);
    let ops = [operations::touch(), operations::get_bin("a")];
    let rec = client.operate(&wp, &k, &ops).await.expect("operate touch");
    assert_eq!(rec.generation, 2);
    // The real server answers nothing for a touch op, even under
    // RESPOND_ALL_OPS (write.c: `if (op->op == AS_MSG_OP_TOUCH) { ...; continue; }`),
    // so the only result is the read's.
    let results = rec.results.as_ref().expect("results");
    assert_eq!(
        results,
        &vec![Value::from("v")],
        "touch must not produce a result entry"
    );
    assert_eq!(rec.bins.len(), 1, "bins: {:?}", rec.bins);
    assert_eq!(rec.bins.get("a"), Some(&Value::from("v")));
    let ttl = ttl_secs(&rec).expect("operate response carries the new void time");
    assert!((2990..=3000).contains(&ttl), "ttl {ttl}");

    let rec = client.get(&rpolicy(), &k, Bins::None).await.unwrap();
    assert_eq!(rec.generation, 2);
    let ttl = ttl_secs(&rec).expect("touched record has a TTL");
    assert!((2990..=3000).contains(&ttl), "ttl {ttl}");

    // get_header in an operate returns no bins.
    let rec = client
        .operate(&wpolicy(), &k, &[operations::get_header()])
        .await
        .unwrap();
    assert!(rec.bins.is_empty(), "bins: {:?}", rec.bins);
    assert_eq!(rec.generation, 2);

    // Operate touch on a missing record → KeyNotFoundError.
    assert_server_error(
        client
            .operate(&wpolicy(), &key("op", "nope"), &[operations::touch()])
            .await,
        ResultCode::KeyNotFoundError,
    );
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operate_delete() {
    let server = BolideServer::start();
    let client = server.client().await;

    // delete() alone removes the record.
    let k = key("op", "del");
    client
        .put(&wpolicy(), &k, &[as_bin!("a", 1i64)])
        .await
        .unwrap();
    let rec = client
        .operate(&wpolicy(), &k, &[operations::delete()])
        .await
        .expect("operate delete");
    // RESPOND_ALL_OPS: the delete answers one NULL entry; a write that
    // deletes the record carries no metadata (generation 0, void time 0).
    assert_eq!(rec.results, Some(vec![Value::Nil]));
    assert_eq!(rec.generation, 0, "deletes don't return metadata");
    assert_eq!(rec.expiration(), 0);
    assert!(!client.exists(&rpolicy(), &k).await.unwrap());

    // (Operate delete of a missing record: see kv.rs
    // binless_write_to_missing_record_is_not_found.)

    // delete() followed by a put leaves only the new bin.
    let k = key("op", "del-put");
    client
        .put(&wpolicy(), &k, &[as_bin!("a", 1i64), as_bin!("b", 2i64)])
        .await
        .unwrap();
    let ops = [operations::delete(), operations::put(&as_bin!("c", 3i64))];
    let rec = client
        .operate(&wpolicy(), &k, &ops)
        .await
        .expect("operate delete+put");
    assert_eq!(rec.results, Some(vec![Value::Nil, Value::Nil]));
    assert_eq!(rec.generation, 2);
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.len(), 1, "bins: {:?}", rec.bins);
    assert_eq!(rec.bins.get("c"), Some(&Value::Int(3)));
    assert_eq!(rec.generation, 2);
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operate_errors() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("op", "err");
    client
        .put(&wpolicy(), &k, &[as_bin!("s", "str"), as_bin!("n", 1i64)])
        .await
        .unwrap();

    // Increment of a string bin → BinTypeError (12); whole operate rolls back.
    let ops = [
        operations::put(&as_bin!("x", 1i64)),
        operations::add(&as_bin!("s", 1i64)),
    ];
    assert_server_error(
        client.operate(&wpolicy(), &k, &ops).await,
        ResultCode::BinTypeError,
    );
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(
        rec.bins.len(),
        2,
        "failed operate must not apply its put: {:?}",
        rec.bins
    );
    assert_eq!(rec.generation, 1);

    // Adding a float to an integer bin is a type error too.
    assert_server_error(
        client
            .operate(&wpolicy(), &k, &[operations::add(&as_bin!("n", 1.5f64))])
            .await,
        ResultCode::BinTypeError,
    );

    // Read-only operate on a missing record → KeyNotFoundError.
    assert_server_error(
        client
            .operate(
                &wpolicy(),
                &key("op", "missing"),
                &[operations::get_bin("a")],
            )
            .await,
        ResultCode::KeyNotFoundError,
    );
    // A write operate on a missing record creates it.
    let k2 = key("op", "created");
    let rec = client
        .operate(
            &wpolicy(),
            &k2,
            &[
                operations::add(&as_bin!("n", 7i64)),
                operations::get_bin("n"),
            ],
        )
        .await
        .expect("operate creates");
    assert_eq!(rec.generation, 1);
    assert_eq!(rec.operation_result(1), Some(&Value::Int(7)));
    client.close().await.unwrap();
}
