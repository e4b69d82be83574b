//! read-touch-ttl-percent: a read that finds its record in the last part of
//! its life pushes the void time forward by the record's last TTL, as the
//! server does (`read_touch.c`). The percent comes in the read's
//! `record_ttl` header field: 0 means the namespace default (none in
//! Bolide, as the server's default `default-read-touch-ttl-pct 0`), -1
//! never, 1 to 100 touch once less than that percent of the TTL is left;
//! more than 100 answers 4. The touch keeps the generation (so a read never
//! fails a later generation check) and runs after the answer is built, under
//! the partition's write lock.

use bolide_store::{Namespace, RecordMeta};
use bolide_types::{now_citrusleaf_milliseconds, Digest, ResultCode};

/// `record_ttl` of a read: never touch.
const NEVER: u32 = u32::MAX;
/// `record_ttl` of a read: the namespace default.
const USE_DEFAULT: u32 = 0;

// PERF: hot path (one comparison for an ordinary read).
/// The TTL to touch the record with, if this read should touch it.
pub fn due(meta: &RecordMeta, percent: u32, now: u32) -> Result<Option<u32>, ResultCode> {
    if meta.void_time == 0 || percent == NEVER || percent == USE_DEFAULT {
        return Ok(None);
    }
    if percent > 100 {
        return Err(ResultCode::Parameter);
    }
    let written = u32::try_from(meta.last_update_ms / 1000).unwrap_or(u32::MAX);
    let write_ttl = meta.void_time.saturating_sub(written);
    let threshold = (u64::from(write_ttl) * u64::from(percent) / 100) as u32;
    if now < meta.void_time.saturating_sub(threshold) {
        return Ok(None);
    }
    Ok(Some(write_ttl))
}

/// Moves the record's void time to now + `ttl` (if that is later), keeping
/// its bins and generation. A record gone or changed meanwhile is left as
/// it is; so is one that cannot be read back or stored (the read was
/// answered already, as on the server).
pub fn touch(namespace: &Namespace, digest: &Digest, ttl: u32) {
    let now_ms = now_citrusleaf_milliseconds();
    let now = u32::try_from(now_ms / 1000).unwrap_or(u32::MAX);
    let mut writer = namespace.write(digest);
    let Some(entry) = writer
        .table()
        .get(digest)
        .filter(|entry| !namespace.is_doomed(&entry.meta, now))
    else {
        return;
    };
    let void_time = now.saturating_add(ttl);
    if entry.meta.void_time == 0 || entry.meta.void_time >= void_time {
        return;
    }
    let mut loaded = Vec::new();
    let Ok(record) = namespace.record_bytes(&entry, &mut loaded) else {
        return;
    };
    let record = record.to_vec();
    let meta = RecordMeta {
        void_time,
        last_update_ms: namespace.update_stamp_ms(entry.meta.set_id, now_ms),
        ..entry.meta
    };
    let _ = writer.put(digest, meta, &record);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touches_in_the_last_part_of_the_ttl() {
        // Written at 1000 s with a TTL of 100 s.
        let meta = RecordMeta {
            void_time: 1100,
            last_update_ms: 1_000_000,
            ..RecordMeta::default()
        };
        assert_eq!(due(&meta, 80, 1019), Ok(None));
        assert_eq!(due(&meta, 80, 1020), Ok(Some(100)));
        assert_eq!(due(&meta, 100, 1000), Ok(Some(100)));
        assert_eq!(due(&meta, NEVER, 1099), Ok(None));
        assert_eq!(due(&meta, USE_DEFAULT, 1099), Ok(None));
        assert_eq!(due(&meta, 101, 1099), Err(ResultCode::Parameter));
        let forever = RecordMeta::default();
        assert_eq!(due(&forever, 101, 1099), Ok(None));
    }
}
