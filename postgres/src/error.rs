//! The crate's error type: the in-memory engine's errors for misuse, and
//! the ways a server can fail.

use std::fmt;

/// Everything that can go wrong with a PostgreSQL-backed limiter.
///
/// A denial is not an error. Misuse (a bad rule, a cost above the limit, a
/// key too long, an invalid time) is [`Error::Invalid`], the same
/// [`ratomic::Error`] the in-memory engine gives, raised before any round
/// trip; it changes no state anywhere.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Bad input, found before anything was sent.
    Invalid(ratomic::Error),
    /// The server could not be reached or the connection broke (a wrong
    /// URL, a refused connection, a reset).
    Connection(String),
    /// The call took longer than the limiter's timeout.
    Timeout,
    /// The server answered with an error (a statement timeout, a missing
    /// function: run the migration, see [`schema`](crate::schema)).
    Server(String),
    /// The server answered something this crate does not understand (a
    /// database whose `ratomic_v1_*` functions are not this crate's).
    Reply(String),
}

impl Error {
    /// Whether the error is about the backend (connection, timeout, server,
    /// reply) rather than the caller's input: the errors a failure policy
    /// answers.
    pub fn is_backend(&self) -> bool {
        !matches!(self, Error::Invalid(_))
    }
}

impl From<ratomic::Error> for Error {
    fn from(e: ratomic::Error) -> Self {
        Error::Invalid(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid(e) => e.fmt(f),
            Error::Connection(m) => write!(f, "cannot reach the PostgreSQL server: {m}"),
            Error::Timeout => f.write_str(
                "the PostgreSQL call timed out: the server is slow, overloaded or unreachable, or the key's row is held (if it is only slow, raise the limiter's timeout)",
            ),
            Error::Server(m) => write!(f, "the PostgreSQL server answered an error: {m}"),
            Error::Reply(m) => write!(f, "unexpected reply from the PostgreSQL server: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Invalid(e) => Some(e),
            _ => None,
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
