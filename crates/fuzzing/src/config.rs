//! The configuration parser: any text either parses into a configuration
//! within the documented bounds, or fails with an error that names a line
//! of the text (or line 0 for the file as a whole) and a directive.

use bolide_server::config::{Config, PROTO_BUFFER_BUDGET_MIN};

/// Parses `bytes` (as UTF-8; other bytes are not a configuration file the
/// node could read) and checks the outcome.
pub fn check(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let first = Config::parse(text);
    assert_eq!(first, Config::parse(text), "parsing is not deterministic");
    match first {
        Ok(config) => check_config(&config),
        Err(error) => {
            let lines = text.lines().count();
            assert!(
                error.line <= lines,
                "error names line {} of {lines}: {error}",
                error.line
            );
            assert!(!error.message.is_empty(), "error without a message");
            let shown = error.to_string();
            assert!(shown.starts_with("config error"), "{shown}");
            if error.line > 0 {
                assert!(shown.contains(&format!("line {}", error.line)), "{shown}");
            }
        }
    }
}

fn check_config(config: &Config) {
    if let Some(security) = &config.security {
        assert!((120..=864_000).contains(&security.session_ttl_seconds));
        assert!((10..=86_400).contains(&security.privilege_refresh_period_seconds));
        assert!((2..=20).contains(&security.tps_weight));
    }
    assert!(!config.namespaces.is_empty(), "no namespace");
    assert!((1..=256).contains(&config.service_threads));
    assert!(config.stop_writes_sys_memory_pct <= 100);
    if let Some(bytes) = config.proto_buffer_budget_bytes {
        assert!(bytes >= PROTO_BUFFER_BUDGET_MIN);
    }
    for (index, namespace) in config.namespaces.iter().enumerate() {
        assert!(
            (1..=bolide_types::NAMESPACE_NAME_BYTES_MAX).contains(&namespace.name.len()),
            "namespace name {:?}",
            namespace.name
        );
        assert!(
            config
                .namespaces
                .iter()
                .skip(index + 1)
                .all(|other| other.name != namespace.name),
            "namespace {:?} twice",
            namespace.name
        );
        assert!(namespace.stop_writes_used_percent <= 100);
        assert!(namespace.evict_used_percent <= 100);
    }
}
