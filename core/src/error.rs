//! The crate's one error type.

use std::borrow::Cow;
use std::fmt;

/// Everything that can go wrong when configuring or calling a limiter.
///
/// A *denial* is not an error: it is a [`Decision`](crate::Decision) with
/// `allowed == false`. Errors are for misuse, and a call that returns an
/// error has changed no state. Each message names the parameter, the value
/// as given and what is accepted.
///
/// ```
/// use ratomic::{Error, TokenBucket};
///
/// let limiter = TokenBucket::builder("5/min").max_key_len(16).build()?;
/// let e = limiter.allow_n("k", 6).unwrap_err();
/// assert_eq!(e, Error::CostExceedsLimit { cost: 6, limit: 5 });
/// assert_eq!(e.to_string(), "cost 6 exceeds the limit 5: this call could never be allowed");
/// let e = limiter.allow("a key of twenty bytes").unwrap_err();
/// assert_eq!(e.to_string(), "key is 21 bytes long; the limit is 16 bytes (the limiter's max_key_len option)");
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A rate string such as `"10/s"` could not be parsed.
    InvalidRate {
        /// The string as given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A numeric parameter is out of range (NaN, infinite, zero, negative,
    /// or too large to represent).
    InvalidArgument {
        /// The parameter's name, e.g. `"refill_per_sec"`.
        name: &'static str,
        /// The offending value, as given.
        value: String,
        /// What the parameter must be.
        reason: Cow<'static, str>,
    },
    /// A call asked for more tokens than the key can ever hold.
    CostExceedsLimit {
        /// The cost asked for.
        cost: u64,
        /// The most the key can hold.
        limit: u64,
    },
    /// A key is longer than the limiter's `max_key_len`.
    KeyTooLong {
        /// The key's length in bytes.
        len: usize,
        /// The longest key the limiter accepts.
        max: usize,
    },
    /// A request of a batch (`allow_many`) is invalid: the whole batch was
    /// refused and nothing changed.
    InvalidRequest {
        /// The position of the first invalid request.
        index: usize,
        /// What is wrong with it.
        error: Box<Error>,
    },
    /// The file a limiter shares with the host's other processes
    /// ([`Options::shared_file`](crate::Options::shared_file)) could not
    /// serve a call: its file system is full (a new key needs backing
    /// store), or another process holds the key and does not let go. Not
    /// a misuse: the call changed nothing, and may succeed once the cause
    /// is gone; the reason says what to do.
    SharedFile {
        /// The file's path.
        path: String,
        /// What went wrong and what to do about it.
        reason: String,
    },
}

impl Error {
    /// The error itself, or for a batch, the error of its invalid request.
    ///
    /// ```
    /// use ratomic::{Error, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder("1/s").build()?;
    /// let e = limiter.allow_many([("a", 1), ("b", 2)]).unwrap_err();
    /// assert!(matches!(e, Error::InvalidRequest { index: 1, .. }));
    /// assert_eq!(e.cause(), &Error::CostExceedsLimit { cost: 2, limit: 1 });
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn cause(&self) -> &Error {
        match self {
            Error::InvalidRequest { error, .. } => error.cause(),
            e => e,
        }
    }
}

impl Error {
    pub(crate) fn invalid(name: &'static str, value: impl fmt::Display, reason: impl Into<Cow<'static, str>>) -> Self {
        Error::InvalidArgument { name, value: value.to_string(), reason: reason.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidRate { input, reason } => {
                write!(
                    f,
                    "invalid rate {input:?}: {reason} (expected \"<count>/<period>\" or \"<count> per <period>\", e.g. \"10/s\", \"100/min\", \"3/250ms\", \"5 per minute\")"
                )
            }
            Error::InvalidArgument { name, value, reason } => {
                write!(f, "invalid {name}: {value} ({reason})")
            }
            Error::CostExceedsLimit { cost, limit } => {
                write!(f, "cost {cost} exceeds the limit {limit}: this call could never be allowed")
            }
            Error::KeyTooLong { len, max } => {
                write!(f, "key is {len} bytes long; the limit is {max} bytes (the limiter's max_key_len option)")
            }
            Error::InvalidRequest { index, error } => {
                write!(f, "request {index} of the batch: {error} (nothing in the batch was decided)")
            }
            Error::SharedFile { path, reason } => write!(f, "shared file {path}: {reason}"),
        }
    }
}

impl std::error::Error for Error {}

/// For conversions that cannot fail (a [`Quota`](crate::Quota) passed where
/// a builder also takes a rate string).
impl From<std::convert::Infallible> for Error {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

/// `Result` with this crate's [`Error`].
///
/// ```
/// use ratomic::{Result, TokenBucket};
///
/// fn admitted(limiter: &TokenBucket, user: &str) -> Result<bool> {
///     Ok(limiter.allow(user)?.allowed)
/// }
/// assert!(admitted(&TokenBucket::builder("1/s").build()?, "alice")?);
/// # Ok::<(), ratomic::Error>(())
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;
