//! The connection carries its caller to every request it answers: with a
//! caller whose policy refuses everything, the server's own frame loop
//! (`connection::answer_buffered`, as `bolided` runs it, minus the socket)
//! answers a put and a scan with 81 and the info commands that change
//! things with `ERROR:81:role violation`, while the ones that only tell
//! still answer; the policy is asked with the permission, namespace and
//! set of each.

use bolide_server::config::Config;
use bolide_server::connection::{answer_buffered, Session, Step};
use bolide_server::node::Node;
use bolide_transaction::{AccessPolicy, Caller, Permission};
use bolide_types::ResultCode;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

type Asked = Vec<(Permission, Option<String>, Option<Vec<u8>>)>;

#[derive(Default)]
struct RefuseAll {
    asked: Mutex<Asked>,
}

impl AccessPolicy for RefuseAll {
    fn check(
        &self,
        _caller: &Caller,
        permission: Permission,
        namespace: Option<&str>,
        set: Option<&[u8]>,
    ) -> Result<(), ResultCode> {
        self.asked.lock().expect("lock").push((
            permission,
            namespace.map(str::to_owned),
            set.map(<[u8]>::to_vec),
        ));
        Err(ResultCode::RoleViolation)
    }
}

fn frame(message_type: u8, body: &[u8]) -> Vec<u8> {
    let mut out = ((2u64 << 56) | (u64::from(message_type) << 48) | body.len() as u64)
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(body);
    out
}

/// An AS_MSG body on test/demo: a put of one bin when `digest` is given,
/// else a scan.
fn message(digest: Option<[u8; 20]>) -> Vec<u8> {
    let write = digest.is_some();
    let mut body = vec![22u8, if write { 0 } else { 1 }, u8::from(write), 0, 0, 0];
    body.extend_from_slice(&[0u8; 12]);
    body.extend_from_slice(&(2 + u16::from(write)).to_be_bytes());
    body.extend_from_slice(&u16::from(write).to_be_bytes());
    let mut fields: Vec<(u8, Vec<u8>)> = vec![(0, b"test".to_vec()), (1, b"demo".to_vec())];
    if let Some(digest) = digest {
        fields.push((4, digest.to_vec()));
    }
    for (kind, data) in fields {
        body.extend_from_slice(&(data.len() as u32 + 1).to_be_bytes());
        body.push(kind);
        body.extend_from_slice(&data);
    }
    if write {
        // op WRITE (2), string particle (3), bin "v" = "x".
        body.extend_from_slice(&6u32.to_be_bytes());
        body.extend_from_slice(&[2, 3, 0, 1, b'v', b'x']);
    }
    body
}

/// Feeds `bytes` to a fresh session of `caller` and returns the frames
/// answered: (type, body).
fn answer(node: &Node, caller: Caller, bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let context = node.connection_context();
    let mut session = Session::new(&context, SocketAddr::from(([127, 0, 0, 1], 3000)), caller);
    session.input.extend(bytes);
    let mut output = Vec::new();
    loop {
        let step = answer_buffered(&context, &mut session);
        output.append(&mut session.output);
        match step {
            Step::Read => break,
            Step::Flush => {}
            Step::Stream(mut job, _) => while !job.fill(&mut output) {},
            Step::Inflate(_) | Step::Admin(_) | Step::Close(_) => panic!("unexpected step"),
        }
    }
    let mut frames = Vec::new();
    let mut rest = output.as_slice();
    while let Some(header) = rest.first_chunk::<8>() {
        let size = (u64::from_be_bytes(*header) & 0xffff_ffff_ffff) as usize;
        frames.push((header[1], rest[8..8 + size].to_vec()));
        rest = &rest[8 + size..];
    }
    frames
}

#[test]
fn a_connection_asks_its_caller_before_each_request_and_info_command() {
    let node = Node::new(Config::default()).expect("node");
    node.serve_alone();
    let policy = Arc::new(RefuseAll::default());
    let refusing = Caller::with_policy(None, policy.clone());

    let mut bytes = frame(3, &message(Some([3; 20])));
    bytes.extend(frame(3, &message(None)));
    let commands = "truncate:namespace=test;set=demo\n\
                    sindex-create:namespace=test;set=demo;indexname=i;indextype=default;indexdata=v,string\n\
                    udf-put:filename=m.lua;content=YQ==;content-len=4\n\
                    query-abort-all\n\
                    recluster\n\
                    set-config:context=namespace;id=test;compression=none\n\
                    build\n";
    bytes.extend(frame(1, commands.as_bytes()));
    let frames = answer(&node, refusing, &bytes);
    assert_eq!(frames.len(), 3, "{frames:?}");
    // The put and the scan (its LAST message) answer 81.
    assert_eq!((frames[0].0, frames[0].1[5]), (3, 81));
    assert_eq!((frames[1].0, frames[1].1[5]), (3, 81));
    let info = String::from_utf8(frames[2].1.clone()).expect("utf-8");
    let lines: Vec<&str> = info.lines().collect();
    assert_eq!(lines.len(), 7, "{info}");
    let permissions = [
        "truncate",
        "sindex-admin",
        "udf-admin",
        "query-admin",
        "service-ctrl",
        "set-config",
    ];
    for (line, permission) in lines[..6].iter().zip(permissions) {
        assert!(
            line.ends_with(&format!(
                "\tERROR:81:role violation - requires permission '{permission}'"
            )),
            "{line}"
        );
    }
    assert_eq!(lines[6], "build\t8.1.0.0");
    let on = |permission, set: Option<&[u8]>| {
        (permission, Some("test".to_owned()), set.map(<[u8]>::to_vec))
    };
    assert_eq!(
        *policy.asked.lock().expect("lock"),
        [
            on(Permission::Write, Some(b"demo")),
            on(Permission::Query, Some(b"demo")),
            on(Permission::Truncate, Some(b"demo")),
            on(Permission::SindexAdmin, Some(b"demo")),
            (Permission::UdfAdmin, None, None),
            (Permission::QueryAdmin, None, None),
            (Permission::ServiceCtrl, None, None),
            (Permission::SetConfig, None, None),
        ]
    );

    // Nothing happened: an open caller finds no record, no index, no module.
    let mut get = message(Some([3; 20]));
    get[1] = 0x03; // info1 READ | GET_ALL
    get[2] = 0;
    get[21] = 0; // no ops
    get.truncate(get.len() - 10);
    let check = "sindex-list\nudf-list\n";
    let mut bytes = frame(3, &get);
    bytes.extend(frame(1, check.as_bytes()));
    let frames = answer(&node, Caller::client(None), &bytes);
    assert_eq!(frames[0].1[5], ResultCode::NotFound.as_u8());
    assert_eq!(
        String::from_utf8(frames[1].1.clone()).expect("utf-8"),
        "sindex-list\t\nudf-list\t\n"
    );
}
