//! UDF module and job info commands: `udf-put`, `udf-get`, `udf-list`,
//! `udf-remove`, `query-show` / `scan-show` / `jobs`, `query-abort`, in the
//! formats of the server's `udf_cask.c` and `query_job.c`.

use crate::cluster::Context;
use base64::Engine;
use bolide_transaction::udf::modules::{self, MODULE_BYTES_MAX};
use bolide_wire::info::InfoCommand;

/// The answer to one of the UDF or job commands.
pub fn answer(node: &Context, command: &InfoCommand<'_>) -> String {
    match command.name {
        "udf-put" => put(node, command),
        "udf-get" => get(node, command),
        "udf-list" => list(node),
        "udf-remove" => remove(node, command),
        "query-abort" | "scan-abort" => abort(node, command),
        "query-abort-all" | "scan-abort-all" => {
            for job in node.services.jobs.list() {
                job.abandon();
            }
            "ok".to_owned()
        }
        _ => show(node, command),
    }
}

/// `udf-put:filename=<f>;content=<base64>;content-len=<len>[;udf-type=LUA]`.
fn put(node: &Context, command: &InfoCommand<'_>) -> String {
    let Some(filename) = command.param("filename").filter(|f| modules::valid_name(f)) else {
        return "error=invalid_filename".to_owned();
    };
    let Some(length) = command
        .param("content-len")
        .and_then(|len| len.parse::<usize>().ok())
        .filter(|len| len % 4 == 0)
    else {
        return "error=invalid_content_len".to_owned();
    };
    if command
        .param("udf-type")
        .is_some_and(|kind| !kind.eq_ignore_ascii_case("LUA"))
    {
        return "error=invalid_udf_type".to_owned();
    }
    let Some(content) = command.param("content").filter(|c| c.len() == length) else {
        return "error=invalid_content".to_owned();
    };
    if length / 4 * 3 > MODULE_BYTES_MAX + 2 {
        return "error=invalid_udf_content_len,>1M".to_owned();
    }
    let Ok(source) = base64::engine::general_purpose::STANDARD.decode(content) else {
        return "error=invalid_base64_content".to_owned();
    };
    if source.len() > MODULE_BYTES_MAX {
        return "error=invalid_udf_content_len,>1M".to_owned();
    }
    if let Err(error) = bolide_udf::check_source(filename, &source) {
        let message = base64::engine::general_purpose::STANDARD.encode(error.message.as_bytes());
        return format!(
            "error=compile_error;file={filename};line={};message={message}",
            error.line
        );
    }
    match node.services.udfs.apply_set(filename, source) {
        Ok(()) => {
            // Every other node of the cluster gets the module too.
            node.cluster.share("udf", filename, content, false);
            "ok".to_owned()
        }
        Err(error) => {
            tracing::error!(%error, "udf-put");
            "error=unknown_error".to_owned()
        }
    }
}

/// `udf-get:filename=<f>`: `type=LUA;content=<base64>;`.
fn get(node: &Context, command: &InfoCommand<'_>) -> String {
    let Some(filename) = command.param("filename").filter(|f| modules::valid_name(f)) else {
        return "error=invalid_filename".to_owned();
    };
    match node.services.udfs.get(filename) {
        Some(module) if module.source.is_empty() => "error=empty".to_owned(),
        Some(module) => format!(
            "type=LUA;content={};",
            base64::engine::general_purpose::STANDARD.encode(&module.source)
        ),
        None => "error=not_found".to_owned(),
    }
}

/// `udf-list`: `filename=<f>,hash=<sha1>,type=LUA;` per module.
fn list(node: &Context) -> String {
    let (_, modules) = node.services.udfs.modules();
    modules
        .iter()
        .map(|module| format!("filename={},hash={},type=LUA;", module.name, module.hash))
        .collect()
}

/// `udf-remove:filename=<f>`: `ok` (also when there is no such module).
fn remove(node: &Context, command: &InfoCommand<'_>) -> String {
    // As on Aerospike, any name that fits answers "ok", a module that
    // does not exist included; only registered (valid) names touch disk.
    let Some(filename) = command
        .param("filename")
        .filter(|f| f.len() <= modules::FILE_NAME_BYTES_MAX)
    else {
        return "error=invalid_filename".to_owned();
    };
    match node.services.udfs.apply_remove(filename) {
        Ok(()) => {
            node.cluster.share("udf", filename, "", true);
            "ok".to_owned()
        }
        Err(error) => {
            tracing::error!(%error, "udf-remove");
            "error=unknown_error".to_owned()
        }
    }
}

/// The job id a command names (`id=` since 8.1, `trid=` before).
fn job_id(command: &InfoCommand<'_>) -> Option<u64> {
    command
        .param("id")
        .or_else(|| command.param("trid"))
        .and_then(|id| id.parse().ok())
}

/// `query-show[:id=<id>]`, `scan-show…`, `jobs:module=…;cmd=get-job;trid=…`:
/// one job, or every job (`;`-separated).
fn show(node: &Context, command: &InfoCommand<'_>) -> String {
    match job_id(command) {
        Some(id) => match node.services.jobs.find(id) {
            Some(job) => job.info(),
            None => "ERROR:2:job not found".to_owned(),
        },
        None if command.param("id").is_some() || command.param("trid").is_some() => {
            "ERROR:4:bad job id".to_owned()
        }
        None => node
            .services
            .jobs
            .list()
            .iter()
            .map(|job| job.info())
            .collect::<Vec<_>>()
            .join(";"),
    }
}

/// `query-abort:id=<id>`.
fn abort(node: &Context, command: &InfoCommand<'_>) -> String {
    match job_id(command).and_then(|id| node.services.jobs.find(id)) {
        Some(job) => {
            job.abandon();
            "ok".to_owned()
        }
        None => "ERROR:2:job not found".to_owned(),
    }
}
