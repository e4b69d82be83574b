//! Single-record put/get/exists/delete/touch semantics through the official
//! Aerospike Rust client against a real bolided.

use std::collections::HashMap;

use aerospike::{
    as_bin, as_blob, as_geo, as_list, as_map, as_val, operations, Bin, Bins, GenerationPolicy,
    RecordExistsAction, ResultCode, Value,
};
use bolide_client_tests::{assert_server_error, key, rpolicy, wpolicy, BolideServer};

const GEO: &str = r#"{ "type": "Point", "coordinates": [17.119381, 19.45612] }"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_every_bin_type() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("types", "all-types");

    let mut map = HashMap::new();
    map.insert(Value::from("s"), Value::from("v"));
    map.insert(Value::from(7i64), Value::from(-7i64));
    map.insert(Value::from("nested"), as_list!(1i64, "two", 3.5f64));
    map.insert(Value::from("b"), Value::from(true));
    let map_value = Value::HashMap(map);

    let list_value = as_list!(
        1i64,
        -1i64,
        i64::MAX,
        i64::MIN,
        "str",
        2.25f64,
        as_blob!(vec![0u8, 255u8]),
        as_list!("inner", 0i64),
        as_map!("k" => 1i64),
        true,
        Value::Nil
    );

    let bins: Vec<Bin> = vec![
        as_bin!("int", 42i64),
        as_bin!("neg", -123_456_789i64),
        as_bin!("zero", 0i64),
        as_bin!("imax", i64::MAX),
        as_bin!("imin", i64::MIN),
        as_bin!("float", std::f64::consts::PI),
        as_bin!("negfloat", -0.5f64),
        as_bin!("str", "hello, wörld ✓"),
        as_bin!("emptystr", ""),
        as_bin!("blob", as_blob!(vec![0u8, 1, 2, 254, 255])),
        as_bin!("bool_t", true),
        as_bin!("bool_f", false),
        as_bin!("list", list_value.clone()),
        as_bin!("map", map_value.clone()),
        as_bin!("geo", as_geo!(GEO)),
        as_bin!("name-len-15-abc", "max bin name"),
    ];
    client.put(&wpolicy(), &k, &bins).await.expect("put");

    let rec = client.get(&rpolicy(), &k, Bins::All).await.expect("get");
    assert_eq!(rec.generation, 1, "fresh record has generation 1");
    assert_eq!(rec.bins.len(), bins.len(), "bins: {:?}", rec.bins);
    let b = &rec.bins;
    assert_eq!(b.get("int"), Some(&Value::Int(42)));
    assert_eq!(b.get("neg"), Some(&Value::Int(-123_456_789)));
    assert_eq!(b.get("zero"), Some(&Value::Int(0)));
    assert_eq!(b.get("imax"), Some(&Value::Int(i64::MAX)));
    assert_eq!(b.get("imin"), Some(&Value::Int(i64::MIN)));
    assert_eq!(b.get("float"), Some(&Value::from(std::f64::consts::PI)));
    assert_eq!(b.get("negfloat"), Some(&Value::from(-0.5f64)));
    assert_eq!(b.get("str"), Some(&Value::from("hello, wörld ✓")));
    assert_eq!(b.get("emptystr"), Some(&Value::from("")));
    assert_eq!(b.get("blob"), Some(&Value::Blob(vec![0, 1, 2, 254, 255])));
    assert_eq!(b.get("bool_t"), Some(&Value::Bool(true)));
    assert_eq!(b.get("bool_f"), Some(&Value::Bool(false)));
    assert_eq!(b.get("list"), Some(&list_value));
    assert_eq!(b.get("map"), Some(&map_value));
    assert_eq!(b.get("geo"), Some(&Value::GeoJson(GEO.to_string())));
    assert_eq!(b.get("name-len-15-abc"), Some(&Value::from("max bin name")));

    // Exact variants, not just PartialEq-compatible ones.
    assert!(matches!(b.get("bool_t"), Some(Value::Bool(true))));
    assert!(matches!(b.get("geo"), Some(Value::GeoJson(_))));
    assert!(matches!(b.get("blob"), Some(Value::Blob(_))));
    assert!(matches!(b.get("float"), Some(Value::Float(_))));

    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_each_type_are_distinct_records() {
    let server = BolideServer::start();
    let client = server.client().await;
    let wp = wpolicy();
    let k_str = aerospike::Key::new("test", "keys", Value::from("1")).unwrap();
    let k_int = aerospike::Key::new("test", "keys", Value::from(1i64)).unwrap();
    let k_blob = aerospike::Key::new("test", "keys", Value::Blob(vec![b'1'])).unwrap();
    let k_other_set = aerospike::Key::new("test", "keys2", Value::from(1i64)).unwrap();
    let k_no_set = aerospike::Key::new("test", "", Value::from(1i64)).unwrap();
    let all = [&k_str, &k_int, &k_blob, &k_other_set, &k_no_set];
    for (i, k) in all.iter().enumerate() {
        client
            .put(&wp, k, &[as_bin!("i", i as i64)])
            .await
            .expect("put");
    }
    for (i, k) in all.iter().enumerate() {
        let rec = client.get(&rpolicy(), k, Bins::All).await.expect("get");
        assert_eq!(rec.bins.get("i"), Some(&Value::Int(i as i64)), "key {k:?}");
        assert_eq!(rec.generation, 1);
    }
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_named_bins_and_header_only() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("named", "k1");
    client
        .put(
            &wpolicy(),
            &k,
            &[
                as_bin!("a", 1i64),
                as_bin!("b", "two"),
                as_bin!("c", 3.0f64),
            ],
        )
        .await
        .unwrap();
    client
        .put(&wpolicy(), &k, &[as_bin!("a", 10i64)])
        .await
        .unwrap();

    let rec = client
        .get(&rpolicy(), &k, ["a", "c"])
        .await
        .expect("get named");
    assert_eq!(rec.bins.len(), 2, "bins: {:?}", rec.bins);
    assert_eq!(rec.bins.get("a"), Some(&Value::Int(10)));
    assert_eq!(rec.bins.get("c"), Some(&Value::from(3.0f64)));
    assert_eq!(rec.bins.get("b"), None);
    assert_eq!(rec.generation, 2);

    // A named bin that does not exist is simply absent.
    let rec = client
        .get(&rpolicy(), &k, ["b", "nosuchbin"])
        .await
        .expect("get named");
    assert_eq!(rec.bins.len(), 1, "bins: {:?}", rec.bins);
    assert_eq!(rec.bins.get("b"), Some(&Value::from("two")));

    // Header only: no bins, but generation and TTL.
    let rec = client
        .get(&rpolicy(), &k, Bins::None)
        .await
        .expect("get header");
    assert!(
        rec.bins.is_empty(),
        "header read returned bins: {:?}",
        rec.bins
    );
    assert_eq!(rec.generation, 2);
    assert_eq!(rec.time_to_live(), None, "default-ttl 0 => never expires");

    // Reads of a missing key fail with KeyNotFoundError, in every shape.
    let missing = key("named", "missing");
    assert_server_error(
        client.get(&rpolicy(), &missing, Bins::All).await,
        ResultCode::KeyNotFoundError,
    );
    assert_server_error(
        client.get(&rpolicy(), &missing, ["a"]).await,
        ResultCode::KeyNotFoundError,
    );
    assert_server_error(
        client.get(&rpolicy(), &missing, Bins::None).await,
        ResultCode::KeyNotFoundError,
    );
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exists_and_delete() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("del", "k1");
    assert!(!client
        .exists(&rpolicy(), &k)
        .await
        .expect("exists (missing)"));
    client
        .put(&wpolicy(), &k, &[as_bin!("a", 1i64)])
        .await
        .unwrap();
    assert!(client.exists(&rpolicy(), &k).await.expect("exists"));

    assert!(
        client.delete(&wpolicy(), &k).await.expect("delete 1"),
        "first delete"
    );
    assert!(
        !client.delete(&wpolicy(), &k).await.expect("delete 2"),
        "second delete"
    );
    assert!(!client
        .exists(&rpolicy(), &k)
        .await
        .expect("exists after delete"));
    assert_server_error(
        client.get(&rpolicy(), &k, Bins::All).await,
        ResultCode::KeyNotFoundError,
    );

    // Re-creating after delete starts a new record (generation 1, no old bins).
    client
        .put(&wpolicy(), &k, &[as_bin!("b", 2i64)])
        .await
        .unwrap();
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.len(), 1, "bins: {:?}", rec.bins);
    assert_eq!(rec.bins.get("b"), Some(&Value::Int(2)));
    assert_eq!(rec.generation, 1);
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_nil_removes_a_bin_and_last_bin_removes_record() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("nil", "k1");
    client
        .put(&wpolicy(), &k, &[as_bin!("a", 1i64), as_bin!("b", 2i64)])
        .await
        .unwrap();
    client
        .put(&wpolicy(), &k, &[as_bin!("b", None)])
        .await
        .unwrap();
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.len(), 1, "bins: {:?}", rec.bins);
    assert_eq!(rec.bins.get("a"), Some(&Value::Int(1)));
    assert_eq!(rec.generation, 2);

    // Removing the last bin deletes the record.
    client
        .put(&wpolicy(), &k, &[as_bin!("a", None)])
        .await
        .unwrap();
    assert!(!client.exists(&rpolicy(), &k).await.unwrap());

    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touch_bumps_generation() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("touch", "k1");
    client
        .put(&wpolicy(), &k, &[as_bin!("a", "x")])
        .await
        .unwrap();
    let rec = client.get(&rpolicy(), &k, Bins::None).await.unwrap();
    assert_eq!(rec.generation, 1);

    client.touch(&wpolicy(), &k).await.expect("touch");
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.generation, 2);
    assert_eq!(
        rec.bins.get("a"),
        Some(&Value::from("x")),
        "touch keeps bins"
    );

    client.touch(&wpolicy(), &k).await.expect("touch 2");
    let rec = client.get(&rpolicy(), &k, Bins::None).await.unwrap();
    assert_eq!(rec.generation, 3);

    // Touch of a missing record fails.
    assert_server_error(
        client.touch(&wpolicy(), &key("touch", "missing")).await,
        ResultCode::KeyNotFoundError,
    );
    assert!(!client
        .exists(&rpolicy(), &key("touch", "missing"))
        .await
        .unwrap());
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_exists_actions() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("rea", "k1");

    // CreateOnly on a missing record succeeds.
    let mut create_only = wpolicy();
    create_only.record_exists_action = RecordExistsAction::CreateOnly;
    client
        .put(&create_only, &k, &[as_bin!("a", 1i64), as_bin!("b", 2i64)])
        .await
        .expect("create-only on missing");

    // CreateOnly on an existing record → KeyExistsError, record untouched.
    assert_server_error(
        client.put(&create_only, &k, &[as_bin!("a", 99i64)]).await,
        ResultCode::KeyExistsError,
    );
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.get("a"), Some(&Value::Int(1)));
    assert_eq!(rec.generation, 1);

    // UpdateOnly on a missing record → KeyNotFoundError, nothing created.
    let mut update_only = wpolicy();
    update_only.record_exists_action = RecordExistsAction::UpdateOnly;
    let missing = key("rea", "missing");
    assert_server_error(
        client
            .put(&update_only, &missing, &[as_bin!("a", 1i64)])
            .await,
        ResultCode::KeyNotFoundError,
    );
    assert!(!client.exists(&rpolicy(), &missing).await.unwrap());

    // UpdateOnly on an existing record merges bins.
    client
        .put(&update_only, &k, &[as_bin!("c", 3i64)])
        .await
        .expect("update-only on existing");
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.len(), 3, "bins: {:?}", rec.bins);
    assert_eq!(rec.generation, 2);

    // Replace removes bins not named in the write.
    let mut replace = wpolicy();
    replace.record_exists_action = RecordExistsAction::Replace;
    client
        .put(&replace, &k, &[as_bin!("z", "only")])
        .await
        .expect("replace");
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(
        rec.bins.len(),
        1,
        "replace must drop unnamed bins: {:?}",
        rec.bins
    );
    assert_eq!(rec.bins.get("z"), Some(&Value::from("only")));
    assert_eq!(rec.generation, 3);

    // Replace on a missing record creates it.
    let k2 = key("rea", "k2");
    client
        .put(&replace, &k2, &[as_bin!("n", 1i64)])
        .await
        .expect("replace creates");
    assert_eq!(
        client
            .get(&rpolicy(), &k2, Bins::None)
            .await
            .unwrap()
            .generation,
        1
    );

    // ReplaceOnly on a missing record → KeyNotFoundError; on existing, replaces.
    let mut replace_only = wpolicy();
    replace_only.record_exists_action = RecordExistsAction::ReplaceOnly;
    assert_server_error(
        client
            .put(&replace_only, &missing, &[as_bin!("a", 1i64)])
            .await,
        ResultCode::KeyNotFoundError,
    );
    assert!(!client.exists(&rpolicy(), &missing).await.unwrap());
    client
        .put(&replace_only, &k, &[as_bin!("y", 5i64)])
        .await
        .expect("replace-only on existing");
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.len(), 1, "bins: {:?}", rec.bins);
    assert_eq!(rec.bins.get("y"), Some(&Value::Int(5)));
    assert_eq!(rec.generation, 4);
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_policies() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("gen", "k1");
    client
        .put(&wpolicy(), &k, &[as_bin!("a", 1i64)])
        .await
        .unwrap();
    client
        .put(&wpolicy(), &k, &[as_bin!("a", 2i64)])
        .await
        .unwrap();
    assert_eq!(
        client
            .get(&rpolicy(), &k, Bins::None)
            .await
            .unwrap()
            .generation,
        2
    );

    // ExpectGenEqual with a wrong generation → GenerationError, no change.
    let mut eq = wpolicy();
    eq.generation_policy = GenerationPolicy::ExpectGenEqual;
    eq.generation = 1;
    assert_server_error(
        client.put(&eq, &k, &[as_bin!("a", 100i64)]).await,
        ResultCode::GenerationError,
    );
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.get("a"), Some(&Value::Int(2)));
    assert_eq!(rec.generation, 2);

    // ... and with the right one it succeeds.
    eq.generation = 2;
    client
        .put(&eq, &k, &[as_bin!("a", 3i64)])
        .await
        .expect("gen-equal write");
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.get("a"), Some(&Value::Int(3)));
    assert_eq!(rec.generation, 3);

    // ExpectGenGreater: request generation must exceed the record's.
    let mut gt = wpolicy();
    gt.generation_policy = GenerationPolicy::ExpectGenGreater;
    gt.generation = 3;
    assert_server_error(
        client.put(&gt, &k, &[as_bin!("a", 4i64)]).await,
        ResultCode::GenerationError,
    );
    gt.generation = 10;
    client
        .put(&gt, &k, &[as_bin!("a", 4i64)])
        .await
        .expect("gen-gt write");
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.get("a"), Some(&Value::Int(4)));
    assert_eq!(rec.generation, 4);

    // Generation check applies to delete too.
    let mut del = wpolicy();
    del.generation_policy = GenerationPolicy::ExpectGenEqual;
    del.generation = 1;
    assert_server_error(client.delete(&del, &k).await, ResultCode::GenerationError);
    assert!(client.exists(&rpolicy(), &k).await.unwrap());
    del.generation = 4;
    assert!(client.delete(&del, &k).await.expect("gen-equal delete"));
    assert!(!client.exists(&rpolicy(), &k).await.unwrap());
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_append_prepend_commands() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("arith", "k1");

    // add on a missing record creates it.
    client
        .add(&wpolicy(), &k, &[as_bin!("n", 5i64)])
        .await
        .expect("add creates");
    client
        .add(&wpolicy(), &k, &[as_bin!("n", -8i64)])
        .await
        .expect("add");
    client
        .put(&wpolicy(), &k, &[as_bin!("s", "mid")])
        .await
        .unwrap();
    client
        .append(&wpolicy(), &k, &[as_bin!("s", "-end")])
        .await
        .expect("append");
    client
        .prepend(&wpolicy(), &k, &[as_bin!("s", "start-")])
        .await
        .expect("prepend");
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.get("n"), Some(&Value::Int(-3)));
    assert_eq!(rec.bins.get("s"), Some(&Value::from("start-mid-end")));
    assert_eq!(rec.generation, 5);

    // Incrementing a string bin → BinTypeError (12), record unchanged.
    let res = client.add(&wpolicy(), &k, &[as_bin!("s", 1i64)]).await;
    assert_server_error(res, ResultCode::BinTypeError);
    // Appending to an integer bin → BinTypeError too.
    let res = client.append(&wpolicy(), &k, &[as_bin!("n", "x")]).await;
    assert_server_error(res, ResultCode::BinTypeError);
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.get("s"), Some(&Value::from("start-mid-end")));
    assert_eq!(rec.bins.get("n"), Some(&Value::Int(-3)));
    assert_eq!(rec.generation, 5, "failed writes must not bump generation");

    // Adding up to exactly i64::MAX is exact.
    let k2 = key("arith", "k2");
    client
        .put(&wpolicy(), &k2, &[as_bin!("m", i64::MAX - 1)])
        .await
        .unwrap();
    client
        .add(&wpolicy(), &k2, &[as_bin!("m", 1i64)])
        .await
        .unwrap();
    let rec = client.get(&rpolicy(), &k2, ["m"]).await.unwrap();
    assert_eq!(rec.bins.get("m"), Some(&as_val!(i64::MAX)));
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bin_name_and_replace_rules() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("rules", "k1");

    // Bin names are at most 15 bytes. The client itself rejects a longer
    // name in put/get (ErrorKind::InvalidArgument, never sent)...
    let err = client
        .put(&wpolicy(), &k, &[as_bin!("sixteen-chars-xx", 1i64)])
        .await
        .expect_err("16-byte bin name");
    assert!(
        matches!(err.kind(), aerospike::ErrorKind::InvalidArgument),
        "{err}"
    );
    // ... but operate sends it unchecked, and the server must answer
    // BinNameTooLong (21) for writes ...
    assert_server_error(
        client
            .operate(
                &wpolicy(),
                &k,
                &[operations::put(&as_bin!("sixteen-chars-xx", 1i64))],
            )
            .await,
        ResultCode::BinNameTooLong,
    );
    assert!(!client.exists(&rpolicy(), &k).await.unwrap());

    client
        .put(&wpolicy(), &k, &[as_bin!("fifteen-chars-x", 1i64)])
        .await
        .expect("15-byte bin name is allowed");
    // ... and for reads of an existing record.
    assert_server_error(
        client
            .operate(&wpolicy(), &k, &[operations::get_bin("sixteen-chars-xx")])
            .await,
        ResultCode::BinNameTooLong,
    );

    // Record-level replace cannot be combined with bin deletes or modify ops:
    // the real server answers ParameterError (4) and changes nothing.
    let mut replace = wpolicy();
    replace.record_exists_action = RecordExistsAction::Replace;
    assert_server_error(
        client
            .put(&replace, &k, &[as_bin!("a", 1i64), as_bin!("gone", None)])
            .await,
        ResultCode::ParameterError,
    );
    assert_server_error(
        client
            .add(&replace, &k, &[as_bin!("fifteen-chars-x", 1i64)])
            .await,
        ResultCode::ParameterError,
    );
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.len(), 1, "bins: {:?}", rec.bins);
    assert_eq!(rec.bins.get("fifteen-chars-x"), Some(&Value::Int(1)));
    assert_eq!(rec.generation, 1);
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_values_and_many_bins() {
    let server = BolideServer::start();
    let client = server.client().await;

    // A 512 KiB blob and a 100 KB string (multi-segment socket reads/writes).
    let k = key("large", "blob");
    let blob: Vec<u8> = (0..512 * 1024).map(|i| (i * 31 % 251) as u8).collect();
    let text: String = (0..100_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    client
        .put(
            &wpolicy(),
            &k,
            &[as_bin!("blob", blob.clone()), as_bin!("text", text.clone())],
        )
        .await
        .expect("put large record");
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.get("blob"), Some(&Value::Blob(blob)));
    assert_eq!(rec.bins.get("text"), Some(&Value::String(text)));

    // 300 bins in one record.
    let k = key("large", "bins");
    let bins: Vec<Bin> = (0..300i64)
        .map(|i| as_bin!(format!("b{i}"), i * i))
        .collect();
    client
        .put(&wpolicy(), &k, &bins)
        .await
        .expect("put 300 bins");
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.len(), 300);
    for i in 0..300i64 {
        assert_eq!(rec.bins.get(&format!("b{i}")), Some(&Value::Int(i * i)));
    }
    client.close().await.unwrap();
}

/// A write that would leave a *missing* record with no bins is a delete of
/// nothing: the real server answers KeyNotFoundError (write.c: "Didn't
/// exist or was bin cemetery" → AS_ERR_NOT_FOUND) and creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binless_write_to_missing_record_is_not_found() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("binless", "k1");

    assert_server_error(
        client.put(&wpolicy(), &k, &[as_bin!("a", None)]).await,
        ResultCode::KeyNotFoundError,
    );
    assert!(!client.exists(&rpolicy(), &k).await.unwrap());

    assert_server_error(
        client
            .operate(&wpolicy(), &k, &[operations::delete()])
            .await,
        ResultCode::KeyNotFoundError,
    );
    assert!(!client.exists(&rpolicy(), &k).await.unwrap());
    client.close().await.unwrap();
}

/// On a missing record the generation compared is 0: write.c runs
/// `generation_check` after creating the index entry (generation 0), so
/// gen-equal 1 fails with GenerationError and creates nothing, gen-equal 0
/// creates the record, and gen-greater 1 (1 > 0) creates it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_policy_on_missing_record() {
    let server = BolideServer::start();
    let client = server.client().await;
    let fresh = key("gen", "fresh");
    let mut eq_fresh = wpolicy();
    eq_fresh.generation_policy = GenerationPolicy::ExpectGenEqual;
    eq_fresh.generation = 1;
    assert_server_error(
        client.put(&eq_fresh, &fresh, &[as_bin!("a", 1i64)]).await,
        ResultCode::GenerationError,
    );
    assert!(!client.exists(&rpolicy(), &fresh).await.unwrap());
    eq_fresh.generation = 0;
    client
        .put(&eq_fresh, &fresh, &[as_bin!("a", 1i64)])
        .await
        .expect("gen-equal 0 on a missing record creates it");
    assert_eq!(
        client
            .get(&rpolicy(), &fresh, Bins::None)
            .await
            .unwrap()
            .generation,
        1
    );

    let fresh2 = key("gen", "fresh2");
    let mut gt = wpolicy();
    gt.generation_policy = GenerationPolicy::ExpectGenGreater;
    gt.generation = 1;
    client
        .put(&gt, &fresh2, &[as_bin!("a", 1i64)])
        .await
        .expect("gen-greater 1 on a missing record creates it");
    assert!(client.exists(&rpolicy(), &fresh2).await.unwrap());
    client.close().await.unwrap();
}

/// With `use_compression` the client zlib-compresses large requests (proto
/// type 4) and asks for compressed responses (info1 bit 7). bolided links
/// flate2 and is expected to implement both (the CE server would answer
/// ENTERPRISE_ONLY instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_requests_and_responses() {
    let server = BolideServer::start();
    let client = server.client().await;
    let mut wp = wpolicy();
    wp.base_policy.use_compression = true;
    let mut rp = rpolicy();
    rp.base_policy.use_compression = true;

    let k = key("compress", "k1");
    let text = "compressible ".repeat(20_000);
    client
        .put(&wp, &k, &[as_bin!("t", text.clone()), as_bin!("n", 7i64)])
        .await
        .expect("compressed put");
    let rec = client
        .get(&rp, &k, Bins::All)
        .await
        .expect("compressed get");
    assert_eq!(rec.bins.get("t"), Some(&Value::String(text.clone())));
    assert_eq!(rec.bins.get("n"), Some(&Value::Int(7)));
    assert_eq!(rec.generation, 1);
    // And readable without compression.
    let rec = client.get(&rpolicy(), &k, ["t"]).await.unwrap();
    assert_eq!(rec.bins.get("t"), Some(&Value::String(text)));
    client.close().await.unwrap();
}
