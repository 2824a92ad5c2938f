//! Key layout: `<prefix>{<key>}`, one Redis hash per user key.
//!
//! The braces are a Redis Cluster hash tag: the slot comes from the part
//! inside them, so everything stored for one user key lives in one slot, and
//! different user keys spread over the cluster. A user key is any bytes; it
//! is escaped so it can never close the tag early (`%` becomes `%25` and `}`
//! becomes `%7D`, which keeps distinct keys distinct). The prefix may not
//! contain a brace.

use crate::error::{Error, Result};

/// The prefix used when none is given.
pub const DEFAULT_PREFIX: &str = "ratomic:";

/// Checks a key prefix: any bytes but `{` and `}`.
pub fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.contains(['{', '}']) {
        return Err(Error::Invalid(ratomic::Error::InvalidArgument {
            name: "prefix",
            value: format!("{prefix:?}"),
            reason: "may not contain '{' or '}' (the key's hash tag is in braces)".into(),
        }));
    }
    Ok(())
}

/// The Redis key for user key `key` under `prefix` (checked by
/// [`check_prefix`]).
///
/// ```
/// use ratomic_redis::keys::redis_key;
/// assert_eq!(redis_key("rl:", b"user:42"), b"rl:{user:42}");
/// assert_eq!(redis_key("rl:", b"a}b%"), b"rl:{a%7Db%25}");
/// ```
pub fn redis_key(prefix: &str, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + key.len() + 2);
    out.extend_from_slice(prefix.as_bytes());
    out.push(b'{');
    for &b in key {
        match b {
            b'%' => out.extend_from_slice(b"%25"),
            b'}' => out.extend_from_slice(b"%7D"),
            b => out.push(b),
        }
    }
    out.push(b'}');
    out
}

/// The Redis Cluster hash slot of a Redis key (CRC16/XMODEM of its hash
/// tag, mod 16384), as servers compute it.
///
/// ```
/// use ratomic_redis::keys::{hash_slot, redis_key};
/// assert_eq!(hash_slot(b"123456789"), 12739);
/// assert_eq!(hash_slot(&redis_key("a:", b"k")), hash_slot(&redis_key("b:", b"k")));
/// ```
pub fn hash_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter().position(|&b| b == b'}').filter(|&close| close > 0).map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16(tagged) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_keys_cannot_leave_the_hash_tag() {
        let k = redis_key("p:", b"}{x}");
        assert_eq!(k, b"p:{%7D{x%7D}");
        // The tag is exactly the escaped key.
        assert_eq!(hash_slot(&k), crc16(b"%7D{x%7D") % 16384);
    }

    #[test]
    fn escaping_is_injective() {
        let keys: [&[u8]; 6] = [b"%7D", b"}", b"%", b"%25", b"", b"\xff\x00"];
        let mut seen = std::collections::HashSet::new();
        for k in keys {
            assert!(seen.insert(redis_key("p:", k)), "{k:?}");
        }
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(check_prefix("rl:{x}").is_err());
        assert!(check_prefix("rl:").is_ok());
    }

    #[test]
    fn slots_follow_the_hash_tag() {
        // Known values from the Redis Cluster specification.
        assert_eq!(hash_slot(b"foo"), 12182);
        assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
        assert_eq!(hash_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
    }
}
