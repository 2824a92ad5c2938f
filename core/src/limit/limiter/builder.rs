//! The builder's half that collects named limits.

use crate::algorithm::rule::Rule;
use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::limit::base::{Base, Builder};
use crate::store::key::Key;

use super::{LimitSet, Limiter, Rules, MAX_LIMITS};

/// The named limits a [`LimiterBuilder`] has collected.
///
/// ```
/// use ratomic::{Limiter, Rule};
///
/// let builder = Limiter::builder().limit("burst", Rule::parse("10/s")?);
/// assert_eq!(builder.build()?.names().collect::<Vec<_>>(), ["burst"]);
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Limits(pub(super) Vec<(String, Rule)>);

/// Builds a [`Limiter`]: its named limits, key type, clock and store options.
///
/// ```
/// use ratomic::{Limiter, LimiterBuilder, Rule};
///
/// let builder: LimiterBuilder = Limiter::builder().limit("burst", Rule::parse("10/s")?);
/// assert!(builder.build().is_ok());
/// # Ok::<(), ratomic::Error>(())
/// ```
pub type LimiterBuilder<K = [u8], C = MonotonicClock> = Builder<Limits, K, C>;

impl<K: ?Sized + Key, C: Clock> Builder<Limits, K, C> {
    /// Adds a limit. Names must be unique and non-empty; at most
    /// [`MAX_LIMITS`] limits.
    ///
    /// ```
    /// use ratomic::{Limiter, Quota, Rate, Rule};
    ///
    /// let limiter = Limiter::builder()
    ///     .limit("burst", Quota::parse("10/s")?) // a Quota is a token bucket
    ///     .limit("daily", Rule::fixed_window(Rate::parse("1000/day")?)?)
    ///     .build()?;
    /// assert_eq!(limiter.names().collect::<Vec<_>>(), ["burst", "daily"]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn limit(mut self, name: impl Into<String>, rule: impl Into<Rule>) -> Self {
        if let Ok(limits) = &mut self.what {
            limits.0.push((name.into(), rule.into()));
        }
        self
    }

    /// The limiter; errors on no limits, more than [`MAX_LIMITS`], an empty
    /// or duplicate name, or an option out of range.
    ///
    /// ```
    /// use ratomic::{Limiter, Rule};
    ///
    /// assert!(Limiter::builder().build().is_err(), "no limits");
    /// let dup = Limiter::builder().limit("a", Rule::parse("1/s")?).limit("a", Rule::parse("2/s")?);
    /// assert!(dup.build().is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn build(self) -> Result<Limiter<K, C>> {
        let limits = self.what?.0;
        if limits.is_empty() {
            return Err(Error::invalid("limits", "[]", "a Limiter needs at least one limit"));
        }
        if limits.len() > MAX_LIMITS {
            return Err(Error::invalid("limits", limits.len(), "a Limiter holds at most 16 limits"));
        }
        for (i, (name, _)) in limits.iter().enumerate() {
            if name.is_empty() {
                return Err(Error::invalid("limit name", "\"\"", "must not be empty"));
            }
            if limits[..i].iter().any(|(n, _)| n == name) {
                return Err(Error::invalid("limit name", format!("{name:?}"), "is used twice"));
            }
        }
        let (names, rules): (Vec<_>, Vec<_>) = limits.into_iter().map(|(n, r)| (n.into_boxed_str(), r)).unzip();
        let rules = Rules(rules.into_boxed_slice());
        let width = rules.0.len();
        let all = LimitSet(((1u32 << width) - 1) as u16);
        Ok(Limiter { base: Base::new(rules, width, self.clock, &self.options)?, names: names.into_boxed_slice(), all })
    }
}
