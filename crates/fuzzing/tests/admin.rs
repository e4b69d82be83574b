//! The admin target's seeds pass its check, and the check can fail.

use bolide_fuzzing::admin;
use bolide_wire::admin::{append_request, command, field};
use bolide_wire::frame::PROTO_HEADER_BYTES;

#[test]
fn seeds_pass_the_check() {
    let seeds = admin::seeds();
    assert!(seeds.len() >= 40, "{} seeds", seeds.len());
    for seed in &seeds {
        admin::check(seed);
    }
}

#[test]
fn the_check_catches_broken_answers() {
    let mut request = Vec::new();
    append_request(&mut request, command::DROP_USER, &[(field::USER, b"bob")]);
    let request = &request[PROTO_HEADER_BYTES..];
    let good = [
        2, 2, 0, 0, 0, 0, 0, 16, 0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    assert_eq!(admin::check_reply(request, &good), 60);
    let mut unknown_code = good;
    unknown_code[9] = 250;
    let mut long = good.to_vec();
    long.push(0);
    long[7] = 17;
    let mut wrong_type = good;
    wrong_type[1] = 3;
    for broken in [&unknown_code[..], &long, &wrong_type, &good[..20]] {
        let caught = std::panic::catch_unwind(|| admin::check_reply(request, broken));
        assert!(caught.is_err(), "{broken:?} passed");
    }
}

#[test]
#[ignore = "writes files: run by hand with BOLIDE_SEEDS_DIR set"]
fn write_admin_seeds() {
    let directory = std::env::var_os("BOLIDE_SEEDS_DIR").expect("BOLIDE_SEEDS_DIR");
    admin::write_seeds(std::path::Path::new(&directory)).expect("written");
}
