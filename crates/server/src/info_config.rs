//! Storage compression in info: its figures and settings in
//! `namespace/NS` and `get-config`, and `set-config` to change it while
//! the node runs (new writes only; what is stored keeps its method).

use bolide_store::device::compress::{ACCELERATION_MAX, LEVEL_MAX};
use bolide_store::device::Device;
use bolide_store::{Compression, Method, Namespace, Store};
use bolide_wire::info::InfoCommand;
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

/// The compression figures of a persistent namespace (`namespace/NS`).
/// `data_compression_ratio` is Aerospike 7's name (1.000 when not
/// compressing); `device_compression_ratio` its older name, shown, as
/// before 7.0, only while compressing.
pub(crate) fn compression_info(text: &mut String, device: &Device) {
    let setting = device.compression();
    let ratio = device.compression_ratio();
    let _ = write!(text, ";data_compression_ratio={ratio:.3}");
    if setting.method != Method::None {
        let _ = write!(text, ";device_compression_ratio={ratio:.3}");
    }
    let _ = write!(
        text,
        ";storage-engine.compressed_records={};storage-engine.uncompressible_records={}",
        device.stats.compressed_records.load(Relaxed),
        device.stats.uncompressible_records.load(Relaxed),
    );
    text.push_str(&settings(setting));
}

/// The compression settings for `get-config:context=namespace`.
pub(crate) fn compression_config(namespace: &Namespace) -> String {
    match namespace.device() {
        Some(device) => settings(device.compression()),
        None => String::new(),
    }
}

fn settings(setting: Compression) -> String {
    format!(
        ";storage-engine.compression={};storage-engine.compression-level={};\
         storage-engine.compression-acceleration={}",
        setting.method.name(),
        setting.effective_level(),
        setting.effective_acceleration(),
    )
}

/// `set-config:context=namespace;id=NS;compression=zstd` (also
/// `namespace=NS`, `compression-level`, `compression-acceleration`).
pub(crate) fn set_config(store: &Store, command: &InfoCommand<'_>) -> String {
    match command.param("context") {
        Some("namespace") => {}
        Some(other) => return format!("ERROR:4:set-config context {other} is not supported"),
        None => return "ERROR:4:context is required".to_owned(),
    }
    let Some(name) = command.param("id").or_else(|| command.param("namespace")) else {
        return "ERROR:4:id (the namespace) is required".to_owned();
    };
    let Some(namespace) = store.namespace(name.as_bytes()) else {
        return "ERROR:20:namespace not found".to_owned();
    };
    let method = command.param("compression");
    let level = command.param("compression-level");
    let acceleration = command.param("compression-acceleration");
    if method.is_none() && level.is_none() && acceleration.is_none() {
        return "ERROR:4:set-config takes compression, compression-level or compression-acceleration"
            .to_owned();
    }
    let Some(device) = namespace.device() else {
        return "ERROR:4:storage compression needs a namespace with storage files".to_owned();
    };
    let mut setting = device.compression();
    if let Some(method) = method {
        match Method::parse(method) {
            Some(method) => setting.method = method,
            None => {
                return format!(
                    "ERROR:4:'{method}' is not a compression method (none, lz4, snappy or zstd)"
                )
            }
        }
    }
    if let Some(level) = level {
        match level.parse::<u32>() {
            Ok(level) if (1..=LEVEL_MAX).contains(&level) => setting.level = level,
            _ => return format!("ERROR:4:compression-level must be 1 to {LEVEL_MAX}"),
        }
    }
    if let Some(acceleration) = acceleration {
        match acceleration.parse::<u32>() {
            Ok(value) if (1..=ACCELERATION_MAX).contains(&value) => setting.acceleration = value,
            _ => {
                return format!("ERROR:4:compression-acceleration must be 1 to {ACCELERATION_MAX}")
            }
        }
    }
    device.set_compression(setting);
    tracing::info!(
        namespace = name,
        compression = setting.method.name(),
        level = setting.effective_level(),
        acceleration = setting.effective_acceleration(),
        "storage compression changed (new writes)"
    );
    "ok".to_owned()
}
