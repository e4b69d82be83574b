//! TTL on the wire → void time in the index.

use bolide_store::NamespaceConfig;
use bolide_types::{ResultCode, TTL_SECONDS_MAX};

/// `record_ttl` of a write: never expire.
const TTL_NEVER: u32 = 0xFFFF_FFFF;
/// `record_ttl` of a write: keep the record's current expiry.
const TTL_DONT_UPDATE: u32 = 0xFFFF_FFFE;
/// `record_ttl` of a write: namespace default.
const TTL_NAMESPACE_DEFAULT: u32 = 0;

/// The void time a write leaves, or the error for a bad TTL.
/// `current` is the existing record's void time, if it exists.
pub fn void_time(
    config: &NamespaceConfig,
    record_ttl: u32,
    current: Option<u32>,
    now: u32,
) -> Result<u32, ResultCode> {
    let seconds = match record_ttl {
        TTL_NEVER => return Ok(0),
        TTL_DONT_UPDATE => match current {
            Some(void_time) => return Ok(void_time),
            None => config.default_ttl_seconds,
        },
        TTL_NAMESPACE_DEFAULT => config.default_ttl_seconds,
        seconds if seconds <= TTL_SECONDS_MAX => seconds,
        _ => return Err(ResultCode::Parameter),
    };
    if seconds == 0 {
        return Ok(0);
    }
    if config.nsup_period_seconds == 0 && !config.allow_ttl_without_nsup {
        // As the real server: a TTL without a sweeper to honour it is refused.
        return Err(ResultCode::Forbidden);
    }
    Ok(now.saturating_add(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_rules() {
        let mut config = NamespaceConfig::with_name("test");
        config.default_ttl_seconds = 100;
        assert_eq!(void_time(&config, 0, None, 1000), Ok(1100));
        assert_eq!(void_time(&config, TTL_NEVER, Some(5), 1000), Ok(0));
        assert_eq!(void_time(&config, TTL_DONT_UPDATE, Some(5), 1000), Ok(5));
        assert_eq!(void_time(&config, TTL_DONT_UPDATE, None, 1000), Ok(1100));
        assert_eq!(void_time(&config, 30, None, 1000), Ok(1030));
        assert_eq!(
            void_time(&config, TTL_SECONDS_MAX + 1, None, 1000),
            Err(ResultCode::Parameter)
        );
        config.nsup_period_seconds = 0;
        assert_eq!(
            void_time(&config, 30, None, 1000),
            Err(ResultCode::Forbidden)
        );
        assert_eq!(void_time(&config, TTL_NEVER, None, 1000), Ok(0));
    }
}
