//! The sans-IO core: a limiter's rules and key prefix, the parameters of
//! each statement and the decoding of each reply. No client here: any
//! PostgreSQL client (the `client` feature's, or a Python or Node one)
//! moves the bytes.
//!
//! A call is [`schema::CALL`](crate::schema::CALL) with eight parameters;
//! its row holds one `bigint[]`, which [`Limits::decode`] reads.

use std::sync::Arc;
use std::time::Duration;

use ratomic::backend::Grant;
use ratomic::{check_time, Decision, Rule};

use crate::error::{Error, Result};
use crate::rules::PgRule;

/// What a call asks of the SQL function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Consume `cost` if every limit allows it.
    Allow,
    /// Answer as `Allow` would, change nothing.
    Peek,
    /// Give back tokens (never above full).
    Refund,
    /// Forget the key: every limit full again.
    Reset,
}

impl Op {
    /// The function's `op` argument.
    pub fn code(self) -> &'static str {
        match self {
            Op::Allow => "a",
            Op::Peek => "p",
            Op::Refund => "r",
            Op::Reset => "x",
        }
    }
}

/// The prefix used when none is given.
pub const DEFAULT_PREFIX: &str = "ratomic";

/// The name a single-rule limiter's one limit has.
pub const SINGLE: &str = "limit";

/// A limiter's rules (one or several named limits on each key, all or
/// nothing) and the prefix its rows live under: everything needed to call
/// the SQL functions, validated once.
#[derive(Clone, Debug)]
pub struct Limits {
    names: Arc<[Box<str>]>,
    rules: Box<[PgRule]>,
    core_rules: Box<[Rule]>,
    kinds: String,
    p1: Vec<i64>,
    p2: Vec<i64>,
    prefix: String,
    max_key_len: usize,
    /// The smallest limit: the largest cost a call may ask.
    max_cost: u64,
}

impl Limits {
    /// One rule on each key (a token bucket, a fixed or a sliding window).
    pub fn single(rule: impl Into<Rule>) -> Result<Self> {
        Self::new([(SINGLE, rule.into())])
    }

    /// Several named limits on each key, all or nothing. Names are checked
    /// as the in-memory [`ratomic::Limiter`] checks them (1 to 16, unique,
    /// non-empty), with the same errors.
    pub fn new<N: Into<String>>(limits: impl IntoIterator<Item = (N, Rule)>) -> Result<Self> {
        let core = ratomic::Limiter::new(limits)?;
        let names: Arc<[Box<str>]> = core.names().map(Box::from).collect();
        let rules = core.rules().iter().map(PgRule::from_rule).collect::<Result<Box<[_]>, _>>()?;
        let core_rules: Box<[Rule]> = core.rules().into();
        let (mut kinds, mut p1, mut p2) = (String::new(), Vec::new(), Vec::new());
        for r in rules.iter() {
            let (k, a, b) = r.sql_args();
            kinds.push(k);
            p1.push(a);
            p2.push(b);
        }
        let max_cost = rules.iter().map(PgRule::limit).min().unwrap_or(0);
        Ok(Limits {
            names,
            rules,
            core_rules,
            kinds,
            p1,
            p2,
            prefix: DEFAULT_PREFIX.to_owned(),
            max_key_len: core.max_key_len(),
            max_cost,
        })
    }

    /// Rows live under `prefix` (default `"ratomic"`): one prefix per set
    /// of rules. A key's row written under other kinds of rules is read as
    /// a full key (and overwritten by the next call that charges it).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Result<Self> {
        let prefix = prefix.into();
        if prefix.contains('\0') {
            return Err(Error::Invalid(ratomic::Error::InvalidArgument {
                name: "prefix",
                value: format!("{prefix:?}"),
                reason: "may not contain a NUL character (PostgreSQL text cannot hold one)".into(),
            }));
        }
        self.prefix = prefix;
        Ok(self)
    }

    /// The longest key accepted, in bytes (default 1024, as in memory).
    pub fn with_max_key_len(mut self, max: usize) -> Self {
        self.max_key_len = max;
        self
    }

    /// The limits' names, in order.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.names.iter().map(|n| &**n)
    }

    /// The rules, in the functions' terms.
    pub fn rules(&self) -> &[PgRule] {
        &self.rules
    }

    /// The rules as the in-memory engine holds them (what a local fallback
    /// runs).
    pub fn core_rules(&self) -> &[Rule] {
        &self.core_rules
    }

    /// The key prefix (`$2`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// One letter per limit (`$6`).
    pub fn kinds(&self) -> &str {
        &self.kinds
    }

    /// Each limit's first parameter: `T` or the window, µs (`$7`).
    pub fn p1(&self) -> &[i64] {
        &self.p1
    }

    /// Each limit's second parameter: capacity or limit (`$8`).
    pub fn p2(&self) -> &[i64] {
        &self.p2
    }

    /// The longest key accepted, in bytes.
    pub fn max_key_len(&self) -> usize {
        self.max_key_len
    }

    /// The largest cost a call may ask (the smallest limit).
    pub fn max_cost(&self) -> u64 {
        self.max_cost
    }

    /// Checks a call before anything is sent: the key's length and the
    /// cost, with the in-memory engine's errors.
    pub fn check(&self, key: &[u8], cost: u64) -> Result<()> {
        if key.len() > self.max_key_len {
            return Err(ratomic::Error::KeyTooLong { len: key.len(), max: self.max_key_len }.into());
        }
        if cost > self.max_cost {
            return Err(ratomic::Error::CostExceedsLimit { cost, limit: self.max_cost }.into());
        }
        Ok(())
    }

    /// `now_ns` (ns on the caller's clock) as the functions' `at_us`
    /// (whole µs, rounded down), checked as the in-memory engine checks a
    /// time; `None` stays `None` (the server's clock).
    pub fn at_us(&self, now_ns: Option<u64>) -> Result<Option<i64>> {
        // Below 2^62 ns: the µs fit an i64.
        Ok(now_ns.map(check_time).transpose()?.map(|ns| (ns / 1000) as i64))
    }

    /// Decodes the reply to an `Allow` or `Peek` call: the array of
    /// integers the function returns.
    pub fn decode(&self, reply: &[i64]) -> Result<MultiDecision> {
        let n = self.rules.len();
        if reply.len() != 1 + 5 * n || reply.iter().any(|&v| v < 0) {
            return Err(Error::Reply(format!("expected {} non-negative integers, got {reply:?}", 1 + 5 * n)));
        }
        let entries: Entries = reply[1..].chunks_exact(5).map(decision).collect();
        let combined = combine(&entries);
        if combined.allowed != (reply[0] == 1) {
            return Err(Error::Reply(format!("the verdict disagrees with the limits' answers: {reply:?}")));
        }
        Ok(MultiDecision { decision: combined, entries, names: self.names.clone(), source: Source::Postgres })
    }

    /// The one token bucket these limits are, as [`schema::ALLOW`](crate::schema::ALLOW)
    /// takes it: `(T µs, τ = capacity × T µs)`; `None` for any other rules.
    /// τ is below 2^61 (checked when the rule was made), and so is `cost ×
    /// T` for every cost [`check`](Self::check) accepts.
    pub fn one_bucket(&self) -> Option<(i64, i64)> {
        match *self.rules {
            [PgRule::TokenBucket { interval_us, capacity }] => {
                Some((interval_us as i64, (capacity * interval_us) as i64))
            }
            _ => None,
        }
    }

    /// Decodes the reply of [`schema::ALLOW`](crate::schema::ALLOW) when it
    /// granted `cost`: its one integer, the bucket's reset after the call
    /// (µs), from which every field follows, as `ratomic_v1_call` computes
    /// them — remaining `(τ − reset) / T` (none when `reset ≥ τ`), the
    /// capacity as the limit, no wait. `Err` if the limits are not one token
    /// bucket or the reset cannot follow a grant.
    pub fn decode_allow(&self, reply: &[i64]) -> Result<MultiDecision> {
        let (Some((t, tau)), [reset]) = (self.one_bucket(), reply) else {
            return Err(Error::Reply(format!("expected the reset of one token bucket, got {reply:?}")));
        };
        // A grant leaves the TAT at least one interval past now, and at
        // most τ past it.
        if *reset < t || *reset > tau {
            return Err(Error::Reply(format!("a grant's reset must lie in [{t}, {tau}] µs, got {reset}")));
        }
        self.decode(&[1, 1, (tau - reset) / t, self.p2[0], 0, *reset])
    }

    /// Decodes the reply to a lease call ([`schema::LEASE`](crate::schema::LEASE)):
    /// the call's decision, and the lease it brought (tokens, the server's
    /// time, each limit's end).
    pub fn decode_lease(&self, reply: &[i64]) -> Result<(MultiDecision, Grant)> {
        let n = self.rules.len();
        let head = 1 + 5 * n;
        if reply.len() != head + 2 + n || reply[head..].iter().any(|&v| v < 0) {
            return Err(Error::Reply(format!("expected {} non-negative integers, got {reply:?}", head + 2 + n)));
        }
        let d = self.decode(&reply[..head])?;
        let grant = Grant {
            taken: reply[head] as u64,
            now: reply[head + 1] as u64,
            ends: reply[head + 2..].iter().map(|&v| v as u64).collect(),
        };
        Ok((d, grant))
    }

    /// A decision answered from a lease: each limit's answer.
    pub(crate) fn lease_decision(&self, entries: Entries) -> MultiDecision {
        MultiDecision { decision: combine(&entries), entries, names: self.names.clone(), source: Source::Lease }
    }

    /// Each limit as the lease engine takes it: `Some((T µs, burst))` for a
    /// token bucket, `None` for a window.
    pub(crate) fn buckets(&self) -> Vec<Option<(u64, u64)>> {
        self.rules
            .iter()
            .map(|r| match *r {
                PgRule::TokenBucket { interval_us, capacity } => Some((interval_us, capacity)),
                _ => None,
            })
            .collect()
    }

    /// Decodes the reply to a batch of `count` calls: their replies, one
    /// after the other.
    pub fn decode_many(&self, reply: &[i64], count: usize) -> Result<Vec<MultiDecision>> {
        let size = 1 + 5 * self.rules.len();
        if reply.len() != size * count {
            return Err(Error::Reply(format!(
                "expected {} integers for {count} calls, got {}",
                size * count,
                reply.len()
            )));
        }
        reply.chunks_exact(size).map(|r| self.decode(r)).collect()
    }

    /// Decodes the reply to a `Refund` call: how many limits changed.
    pub fn decode_refund(&self, reply: &[i64]) -> Result<usize> {
        match reply {
            [n] if *n >= 0 && *n as usize <= self.rules.len() => Ok(*n as usize),
            _ => Err(Error::Reply(format!("expected the number of limits refunded, got {reply:?}"))),
        }
    }

    /// A decision made by a failure policy: `d` for every limit.
    pub fn policy_decision(&self, d: Decision) -> MultiDecision {
        MultiDecision {
            decision: d,
            entries: smallvec::smallvec![d; self.rules.len()],
            names: self.names.clone(),
            source: Source::Policy,
        }
    }

    /// A denial answered from the local deny cache: `d` for every limit.
    pub fn cached_decision(&self, d: Decision) -> MultiDecision {
        MultiDecision { source: Source::DenyCache, ..self.policy_decision(d) }
    }

    /// A decision of the local in-memory limiter of the same rules.
    pub fn fallback_decision(&self, d: &ratomic::MultiDecision<'_>) -> MultiDecision {
        MultiDecision {
            decision: d.decision,
            entries: d.entries().map(|e| e.decision).collect(),
            names: self.names.clone(),
            source: Source::Fallback,
        }
    }
}

fn decision(v: &[i64]) -> Decision {
    Decision {
        allowed: v[0] == 1,
        remaining: v[1] as u64,
        limit: v[2] as u64,
        retry_after: Duration::from_micros(v[3] as u64),
        reset_after: Duration::from_micros(v[4] as u64),
    }
}

/// As the in-memory `Limiter` combines: allowed only if every limit
/// allowed; the least remaining and that limit's limit; the largest wait
/// among the denying limits; the largest reset.
fn combine(entries: &[Decision]) -> Decision {
    let mut tightest = &entries[0];
    let mut out = Decision { allowed: true, ..*tightest };
    out.retry_after = Duration::ZERO;
    for e in entries {
        out.allowed &= e.allowed;
        if e.remaining < tightest.remaining {
            tightest = e;
        }
        if !e.allowed {
            out.retry_after = out.retry_after.max(e.retry_after);
        }
        out.reset_after = out.reset_after.max(e.reset_after);
    }
    out.remaining = tightest.remaining;
    out.limit = tightest.limit;
    out
}

/// The answer to a call on PostgreSQL: the combined [`Decision`] and one
/// entry per limit (a single-rule limiter has one, named [`SINGLE`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "a decision says whether the call was allowed"]
pub struct MultiDecision {
    /// The combined decision.
    pub decision: Decision,
    entries: Entries,
    names: Arc<[Box<str>]>,
    /// Who answered.
    pub source: Source,
}

/// Each limit's decision, in order (one inline: a single rule allocates nothing).
pub(crate) type Entries = ratomic::backend::Answers;

/// Who answered a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// The SQL function, on the server.
    Postgres,
    /// The local in-memory limiter of the same rules (the server failed and
    /// the policy is to fall back).
    Fallback,
    /// The failure policy (fail open or fail closed) without any limiter.
    Policy,
    /// The local deny cache: the server denied this key and cost, and its
    /// `retry_after` has not ended.
    DenyCache,
    /// A lease: tokens this process took from the server earlier, granted
    /// here (see [`Lease`](crate::Lease)). Its `remaining` is what the
    /// fleet had left at the lease's round trip plus what the lease still
    /// holds.
    Lease,
}

impl MultiDecision {
    /// Whether every limit allowed the call.
    pub fn allowed(&self) -> bool {
        self.decision.allowed
    }

    /// Each limit's name and answer, in the limiter's order. On a denial,
    /// each is what that limit alone would answer: nothing was consumed.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (&str, Decision)> {
        self.names.iter().map(|n| &**n).zip(self.entries.iter().copied())
    }

    /// The named limit's answer.
    pub fn get(&self, name: &str) -> Option<Decision> {
        self.entries().find(|(n, _)| *n == name).map(|(_, d)| d)
    }

    /// The limits that denied the call.
    pub fn denied_by(&self) -> impl Iterator<Item = &str> {
        self.entries().filter(|(_, d)| !d.allowed).map(|(n, _)| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratomic::Rate;

    fn two() -> Limits {
        Limits::new([
            ("burst", Rule::parse("10/s").unwrap()),
            ("daily", Rule::fixed_window(Rate::parse("1000/d").unwrap()).unwrap()),
        ])
        .unwrap()
    }

    #[test]
    fn parameters_carry_the_rules_in_microseconds() {
        let l = two();
        assert_eq!(l.kinds(), "gf");
        assert_eq!(l.p1(), [100_000, 86_400_000_000]);
        assert_eq!(l.p2(), [10, 1000]);
        assert_eq!(l.at_us(Some(5_000_999)).unwrap(), Some(5000));
        assert_eq!(l.at_us(None).unwrap(), None);
    }

    #[test]
    fn the_upserts_reset_is_the_whole_reply_of_a_grant() {
        // 10/s: T = 100 ms, capacity 10, τ = 1 s.
        let l = Limits::single(Rule::parse("10/s").unwrap()).unwrap();
        assert_eq!(l.one_bucket(), Some((100_000, 1_000_000)));
        assert_eq!(two().one_bucket(), None);
        // As ratomic_v1_call answers: [1, 1, remaining, capacity, 0, reset].
        for (reset, remaining) in [(100_000, 9), (150_000, 8), (999_999, 0), (1_000_000, 0)] {
            let want = l.decode(&[1, 1, remaining, 10, 0, reset]).unwrap();
            let got = l.decode_allow(&[reset]).unwrap();
            assert_eq!((got.decision, got.source), (want.decision, want.source), "reset {reset}");
        }
        // No grant leaves a reset outside [T, τ]; the general reply is not one integer.
        for bad in [&[99_999][..], &[1_000_001], &[-1], &[], &[1, 1]] {
            assert!(matches!(l.decode_allow(bad), Err(Error::Reply(_))), "{bad:?}");
        }
        assert!(matches!(two().decode_allow(&[100_000]), Err(Error::Reply(_))));
    }

    #[test]
    fn bad_input_gets_the_in_memory_errors() {
        let l = two();
        assert_eq!(l.check(b"k", 11), Err(Error::Invalid(ratomic::Error::CostExceedsLimit { cost: 11, limit: 10 })));
        let long = vec![b'x'; 1025];
        assert!(matches!(l.check(&long, 1), Err(Error::Invalid(ratomic::Error::KeyTooLong { len: 1025, max: 1024 }))));
        assert!(matches!(l.at_us(Some(1 << 62)), Err(Error::Invalid(_))));
        let same = || [("a", Rule::parse("1/s").unwrap()), ("a", Rule::parse("2/s").unwrap())];
        assert_eq!(Limits::new(same()).unwrap_err(), Error::Invalid(ratomic::Limiter::new(same()).unwrap_err()));
        assert!(two().with_prefix("a\0b").is_err());
    }

    #[test]
    fn replies_decode_and_combine_as_in_memory() {
        let l = two();
        let reply = [0, 1, 9, 10, 0, 100_000, 0, 0, 1000, 7_000_000, 7_000_000];
        let d = l.decode(&reply).unwrap();
        assert!(!d.allowed());
        assert_eq!(d.decision.remaining, 0);
        assert_eq!(d.decision.limit, 1000);
        assert_eq!(d.decision.retry_after, Duration::from_secs(7));
        assert_eq!(d.denied_by().collect::<Vec<_>>(), ["daily"]);
        assert_eq!(d.get("burst").unwrap().remaining, 9);
        assert!(l.decode(&[1, 2, 3]).is_err());
        assert!(l.decode(&[1, 1, 9, 10, 0, 100_000, 0, 0, 1000, 7_000_000, 7_000_000]).is_err(), "verdict mismatch");
        assert_eq!(l.decode_many(&[reply, reply].concat(), 2).unwrap().len(), 2);
        assert!(l.decode_many(&reply, 2).is_err());
        assert_eq!(l.decode_refund(&[2]).unwrap(), 2);
        assert!(l.decode_refund(&[3]).is_err());
    }
}
