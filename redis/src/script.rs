//! The one Lua script (`lua/ratomic.lua`) and its SHA1, for `EVALSHA`.

use std::sync::OnceLock;

/// The script's source. Send it with `SCRIPT LOAD` (or `EVAL`) when a server
/// answers `NOSCRIPT` to [`sha1`], then call it again with `EVALSHA`.
pub const SOURCE: &str = include_str!("../lua/ratomic.lua");

/// The script's SHA1 in lowercase hex, as `SCRIPT LOAD` returns it.
///
/// ```
/// assert_eq!(ratomic_redis::script::sha1().len(), 40);
/// ```
pub fn sha1() -> &'static str {
    static SHA: OnceLock<String> = OnceLock::new();
    SHA.get_or_init(|| sha1_smol::Sha1::from(SOURCE).digest().to_string())
}

/// The error prefix a server answers when it does not know the script.
pub const NOSCRIPT: &str = "NOSCRIPT";
