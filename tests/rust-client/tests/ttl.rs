//! Record expiration (TTL) semantics. The test namespace has `default-ttl 0`
//! (never expire) and `nsup-period 1`.

use std::time::Duration;

use aerospike::{as_bin, Bins, Expiration, ResultCode, Value};
use bolide_client_tests::{assert_server_error, key, rpolicy, ttl_secs, wpolicy, BolideServer};

fn wp(exp: Expiration) -> aerospike::WritePolicy {
    let mut p = wpolicy();
    p.expiration = exp;
    p
}

#[track_caller]
fn assert_ttl_near(actual: Option<u64>, expected: u64) {
    match actual {
        None => panic!("expected TTL ≈ {expected}s, record never expires"),
        Some(t) => assert!(
            t <= expected && t + 5 >= expected,
            "expected TTL in [{}, {expected}], got {t}",
            expected - 5
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiration_variants_are_reflected_in_ttl() {
    let server = BolideServer::start();
    let client = server.client().await;

    // Seconds(n)
    let k = key("ttl", "seconds");
    client
        .put(&wp(Expiration::Seconds(100)), &k, &[as_bin!("a", 1i64)])
        .await
        .unwrap();
    let rec = client.get(&rpolicy(), &k, Bins::None).await.unwrap();
    assert!(
        rec.expiration() > 0,
        "void time must be set, got {}",
        rec.expiration()
    );
    assert_ttl_near(ttl_secs(&rec), 100);
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_ttl_near(ttl_secs(&rec), 100);

    // Never
    let k = key("ttl", "never");
    client
        .put(&wp(Expiration::Never), &k, &[as_bin!("a", 1i64)])
        .await
        .unwrap();
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.expiration(), 0, "never-expire record has void time 0");
    assert_eq!(ttl_secs(&rec), None);

    // NamespaceDefault (default-ttl 0 => never)
    let k = key("ttl", "nsdefault");
    client
        .put(&wp(Expiration::NamespaceDefault), &k, &[as_bin!("a", 1i64)])
        .await
        .unwrap();
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(ttl_secs(&rec), None);

    // DontUpdate on a new record => namespace default (never).
    let k = key("ttl", "dontupdate-new");
    client
        .put(&wp(Expiration::DontUpdate), &k, &[as_bin!("a", 1i64)])
        .await
        .unwrap();
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(ttl_secs(&rec), None);

    // DontUpdate on an existing record keeps its TTL while updating bins.
    let k = key("ttl", "dontupdate");
    client
        .put(&wp(Expiration::Seconds(1000)), &k, &[as_bin!("a", 1i64)])
        .await
        .unwrap();
    client
        .put(&wp(Expiration::DontUpdate), &k, &[as_bin!("a", 2i64)])
        .await
        .unwrap();
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.bins.get("a"), Some(&Value::Int(2)));
    assert_eq!(rec.generation, 2);
    assert_ttl_near(ttl_secs(&rec), 1000);

    // A plain write (NamespaceDefault) resets it to the namespace default (never).
    client
        .put(&wp(Expiration::NamespaceDefault), &k, &[as_bin!("a", 3i64)])
        .await
        .unwrap();
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(
        ttl_secs(&rec),
        None,
        "NamespaceDefault write must reset TTL to default-ttl 0"
    );

    // Never after a finite TTL.
    let k = key("ttl", "to-never");
    client
        .put(&wp(Expiration::Seconds(1000)), &k, &[as_bin!("a", 1i64)])
        .await
        .unwrap();
    client
        .put(&wp(Expiration::Never), &k, &[as_bin!("a", 1i64)])
        .await
        .unwrap();
    let rec = client.get(&rpolicy(), &k, Bins::None).await.unwrap();
    assert_eq!(ttl_secs(&rec), None);

    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touch_sets_ttl_from_policy() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("ttl", "touch");
    client
        .put(&wp(Expiration::Seconds(1000)), &k, &[as_bin!("a", 1i64)])
        .await
        .unwrap();
    client
        .touch(&wp(Expiration::Seconds(5000)), &k)
        .await
        .expect("touch");
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_ttl_near(ttl_secs(&rec), 5000);
    assert_eq!(rec.generation, 2);
    assert_eq!(rec.bins.get("a"), Some(&Value::Int(1)));

    client
        .touch(&wp(Expiration::Never), &k)
        .await
        .expect("touch never");
    let rec = client.get(&rpolicy(), &k, Bins::None).await.unwrap();
    assert_eq!(ttl_secs(&rec), None);
    assert_eq!(rec.generation, 3);
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_record_is_gone() {
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("ttl", "short");
    let keep = key("ttl", "keep");
    client
        .put(&wp(Expiration::Seconds(1)), &k, &[as_bin!("a", 1i64)])
        .await
        .unwrap();
    client
        .put(&wp(Expiration::Never), &keep, &[as_bin!("a", 1i64)])
        .await
        .unwrap();
    assert!(
        client.exists(&rpolicy(), &k).await.unwrap(),
        "exists right after write"
    );

    tokio::time::sleep(Duration::from_millis(2500)).await;

    assert!(
        !client.exists(&rpolicy(), &k).await.unwrap(),
        "expired record must not exist"
    );
    assert_server_error(
        client.get(&rpolicy(), &k, Bins::All).await,
        ResultCode::KeyNotFoundError,
    );
    assert_server_error(
        client.touch(&wpolicy(), &k).await,
        ResultCode::KeyNotFoundError,
    );
    assert!(
        !client.delete(&wpolicy(), &k).await.unwrap(),
        "delete of expired record"
    );
    // The never-expiring neighbour survives.
    assert!(client.exists(&rpolicy(), &keep).await.unwrap());

    // Writing the key again creates a fresh record (generation 1).
    client
        .put(&wpolicy(), &k, &[as_bin!("b", 2i64)])
        .await
        .unwrap();
    let rec = client.get(&rpolicy(), &k, Bins::All).await.unwrap();
    assert_eq!(rec.generation, 1);
    assert_eq!(rec.bins.len(), 1, "bins: {:?}", rec.bins);
    client.close().await.unwrap();
}

/// TTLs above 10 years (315 360 000 s, MAX_ALLOWED_TTL) other than the
/// special values are rejected with ParameterError (write.c is_valid_ttl).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_limit_is_ten_years() {
    const TEN_YEARS: u32 = 3600 * 24 * 365 * 10;
    let server = BolideServer::start();
    let client = server.client().await;
    let k = key("ttl", "limit");
    assert_server_error(
        client
            .put(
                &wp(Expiration::Seconds(TEN_YEARS + 1)),
                &k,
                &[as_bin!("a", 1i64)],
            )
            .await,
        ResultCode::ParameterError,
    );
    assert!(!client.exists(&rpolicy(), &k).await.unwrap());

    client
        .put(
            &wp(Expiration::Seconds(TEN_YEARS)),
            &k,
            &[as_bin!("a", 1i64)],
        )
        .await
        .expect("ten years is allowed");
    let rec = client.get(&rpolicy(), &k, Bins::None).await.unwrap();
    assert_ttl_near(ttl_secs(&rec), u64::from(TEN_YEARS));

    assert_server_error(
        client
            .touch(&wp(Expiration::Seconds(TEN_YEARS + 1)), &k)
            .await,
        ResultCode::ParameterError,
    );
    assert_eq!(
        client
            .get(&rpolicy(), &k, Bins::None)
            .await
            .unwrap()
            .generation,
        1
    );
    client.close().await.unwrap();
}
