//! The sans-IO core: a limiter's rules and key layout, the arguments of each
//! call and the decoding of each reply. No client here: any Redis client
//! (the `client` feature's, or a Python or Node one) moves the bytes.
//!
//! A call is `EVALSHA <script::sha1()> 1 <key> <args…>`; on a `NOSCRIPT`
//! error, `SCRIPT LOAD <script::SOURCE>` and send it again. `reset` is
//! `DEL <key>`.

use std::sync::Arc;
use std::time::Duration;

use ratomic::backend::Grant;
use ratomic::{check_time, Decision, Rule};

use crate::error::{Error, Result};
use crate::keys::{check_prefix, redis_key, DEFAULT_PREFIX};
use crate::rules::RedisRule;

/// What a call asks of the script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Consume `cost` if every limit allows it.
    Allow,
    /// Answer as `Allow` would, change nothing.
    Peek,
    /// Give back tokens (never above full).
    Refund,
}

impl Op {
    fn code(self) -> &'static [u8] {
        match self {
            Op::Allow => b"a",
            Op::Peek => b"p",
            Op::Refund => b"r",
        }
    }
}

/// A limiter's rules (one or several named limits on each key, all or
/// nothing) and where its keys live: everything needed to talk to the
/// script, validated once.
#[derive(Clone, Debug)]
pub struct Limits {
    names: Arc<[Box<str>]>,
    rules: Box<[RedisRule]>,
    core_rules: Box<[Rule]>,
    /// The rule-dependent tail of every call's arguments: field (its first
    /// letter the kind), p1, p2.
    tail: Box<[Vec<u8>]>,
    prefix: String,
    max_key_len: usize,
    ttl_floor_ms: u64,
    /// The smallest limit: the largest cost a call may ask.
    max_cost: u64,
}

/// The name a single-rule limiter's one limit has.
pub const SINGLE: &str = "limit";

impl Limits {
    /// One rule on each key (a token bucket, a fixed or a sliding window).
    pub fn single(rule: impl Into<Rule>) -> Result<Self> {
        Self::new([(SINGLE, rule.into())])
    }

    /// Several named limits on each key, all or nothing. Names
    /// are checked as the in-memory [`ratomic::Limiter`] checks them (1 to
    /// 16, unique, non-empty), with the same errors.
    pub fn new<N: Into<String>>(limits: impl IntoIterator<Item = (N, Rule)>) -> Result<Self> {
        let core = ratomic::Limiter::new(limits)?;
        let names: Arc<[Box<str>]> = core.names().map(Box::from).collect();
        let rules = core.rules().iter().map(RedisRule::from_rule).collect::<Result<Box<[_]>, _>>()?;
        let core_rules: Box<[Rule]> = core.rules().into();
        let mut tail = Vec::with_capacity(rules.len() * 3);
        for (name, rule) in names.iter().zip(rules.iter()) {
            let (kind, p1, p2) = rule.script_args();
            // The kind is part of the field (its first letter, which the
            // script reads it from): state written under another algorithm
            // is never read as this one's.
            tail.push(format!("{kind}:{name}").into_bytes());
            tail.push(p1.to_string().into_bytes());
            tail.push(p2.to_string().into_bytes());
        }
        let max_cost = rules.iter().map(RedisRule::limit).min().unwrap_or(0);
        Ok(Limits {
            names,
            rules,
            core_rules,
            tail: tail.into_boxed_slice(),
            prefix: DEFAULT_PREFIX.to_owned(),
            max_key_len: core.max_key_len(),
            ttl_floor_ms: 0,
            max_cost,
        })
    }

    /// Keys live under `prefix` (default `"ratomic:"`): one prefix per
    /// limiter. No braces.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Result<Self> {
        let prefix = prefix.into();
        check_prefix(&prefix)?;
        self.prefix = prefix;
        Ok(self)
    }

    /// The longest key accepted, in bytes (default 1024, as in memory).
    pub fn with_max_key_len(mut self, n: usize) -> Self {
        self.max_key_len = n;
        self
    }

    /// Keep every written key at least this long (whole ms, rounded up).
    /// By default a key expires exactly when it is full again (its
    /// time-to-full rounded up to whole ms, at least 1 ms). Keeping a key
    /// longer never changes a decision (a full key answers like a missing
    /// one); callers of the `*_at` forms whose times run faster than the
    /// server's clock need it, so that a key does not expire by the server's
    /// clock while it is still drained at theirs.
    pub fn with_ttl_floor(mut self, floor: Duration) -> Self {
        self.ttl_floor_ms = u64::try_from(floor.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
        self
    }

    /// The limits' names, in order.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.names.iter().map(|n| &**n)
    }

    /// The rules, in the script's terms.
    pub fn rules(&self) -> &[RedisRule] {
        &self.rules
    }

    /// The rules as the in-memory engine holds them (what a local fallback
    /// runs).
    pub fn core_rules(&self) -> &[Rule] {
        &self.core_rules
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
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

    /// Checks every request of a batch; the error names the first invalid
    /// one.
    pub fn check_batch<'k>(&self, requests: impl IntoIterator<Item = (&'k [u8], u64)>) -> Result<()> {
        for (index, (key, cost)) in requests.into_iter().enumerate() {
            if let Err(Error::Invalid(e)) = self.check(key, cost) {
                return Err(ratomic::Error::InvalidRequest { index, error: Box::new(e) }.into());
            }
        }
        Ok(())
    }

    /// The Redis key holding `key`'s state.
    pub fn key(&self, key: &[u8]) -> Vec<u8> {
        redis_key(&self.prefix, key)
    }

    /// The script's arguments (`ARGV`) for `op` with `amount` (a cost or, for
    /// a refund, tokens) at `now_ns` (nanoseconds on the caller's clock,
    /// rounded down to µs) or, when `None`, at the server's `TIME`.
    ///
    /// The key and cost are not checked here: call [`check`](Self::check)
    /// first (refunds take any number of tokens).
    pub fn args(&self, op: Op, now_ns: Option<u64>, amount: u64) -> Result<Vec<Vec<u8>>> {
        let now = match now_ns {
            Some(ns) => (check_time(ns)? / 1000).to_string().into_bytes(),
            None => Vec::new(),
        };
        let mut args = Vec::with_capacity(4 + self.tail.len());
        args.push(op.code().to_vec());
        args.push(now);
        args.push(amount.to_string().into_bytes());
        args.extend(self.tail.iter().cloned());
        // Only when there is one: an argument costs the server as much as
        // a fifth of the script's common path.
        if self.ttl_floor_ms != 0 {
            args.push(self.ttl_floor_ms.to_string().into_bytes());
        }
        Ok(args)
    }

    /// The arguments of an `Allow` of `cost` at `now_ns` (or the server's
    /// time) that also leases up to `size` more tokens of every limit (all
    /// token buckets).
    pub(crate) fn lease_args(&self, now_ns: Option<u64>, cost: u64, size: u64) -> Result<Vec<Vec<u8>>> {
        let mut args = self.args(Op::Allow, now_ns, cost)?;
        args[0] = format!("l{size}").into_bytes();
        Ok(args)
    }

    /// The arguments of a give-back of a lease's unused slots: per limit,
    /// the lease's end and its first unused slot (server µs).
    pub(crate) fn give_back_args(&self, ends: &[u64], next: &[u64]) -> Vec<Vec<u8>> {
        let mut args = self.args(Op::Allow, None, 0).expect("no time to check");
        let pairs: Vec<String> = ends.iter().zip(next).map(|(e, n)| format!("{e},{n}")).collect();
        args[0] = format!("g{}", pairs.join(";")).into_bytes();
        args
    }

    /// The arguments of a reset (every limit full again, but for the slots
    /// leases hold) at `now_ns` or the server's time.
    pub(crate) fn reset_args(&self, now_ns: Option<u64>) -> Result<Vec<Vec<u8>>> {
        let mut args = self.args(Op::Allow, now_ns, 0)?;
        args[0] = b"x".to_vec();
        Ok(args)
    }

    /// Decodes the reply to a lease call: the call's decision, and the
    /// lease it brought (tokens, the server's time, each limit's end).
    pub(crate) fn decode_lease(&self, reply: &[i64]) -> Result<(MultiDecision, Grant)> {
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

    /// Decodes the reply to an `Allow` or `Peek` call: the array of
    /// integers the script returns.
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
        Ok(MultiDecision { decision: combined, entries, names: self.names.clone(), source: Source::Redis })
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

    /// Decodes the reply to a `Refund` call: how many limits changed.
    pub fn decode_refund(&self, reply: &[i64]) -> Result<usize> {
        match reply {
            [n] if *n >= 0 && *n as usize <= self.rules.len() => Ok(*n as usize),
            _ => Err(Error::Reply(format!("expected the number of limits refunded, got {reply:?}"))),
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

/// As the in-memory `Limiter` combines: allowed only if every
/// limit allowed; the least remaining and that limit's limit; the largest
/// wait among the denying limits; the largest reset.
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

/// The answer to a call on Redis: the combined [`Decision`] and one entry
/// per limit (a single-rule limiter has one, named [`SINGLE`]).
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
    /// The Redis script.
    Redis,
    /// The local in-memory limiter of the same rules (Redis failed and the
    /// policy is to fall back).
    Fallback,
    /// The failure policy (fail open or fail closed) without any limiter.
    Policy,
    /// The local deny cache: Redis denied this key and cost, and its
    /// `retry_after` has not ended.
    DenyCache,
    /// A lease: tokens this process took from Redis earlier, granted here
    /// (see [`Lease`](crate::Lease)). Its `remaining` is what the fleet had
    /// left at the lease's round trip plus what the lease still holds.
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
    fn arguments_carry_the_rules_in_microseconds() {
        let l = two();
        let args = l.args(Op::Allow, Some(5_000_999), 3).unwrap();
        let text: Vec<String> = args.iter().map(|a| String::from_utf8(a.clone()).unwrap()).collect();
        assert_eq!(text, ["a", "5000", "3", "g:burst", "100000", "10", "f:daily", "86400000000", "1000"]);
        assert_eq!(l.args(Op::Peek, None, 1).unwrap()[1], b"");
        assert_eq!(l.key(b"u}1"), b"ratomic:{u%7D1}");
        // A TTL floor, when there is one, comes last.
        let floored = two().with_ttl_floor(Duration::from_micros(1_500_001));
        let args = floored.args(Op::Allow, None, 1).unwrap();
        assert_eq!((args.len(), args.last().unwrap().as_slice()), (10, &b"1501"[..]));
    }

    #[test]
    fn bad_input_gets_the_in_memory_errors() {
        let l = two();
        assert_eq!(l.check(b"k", 11), Err(Error::Invalid(ratomic::Error::CostExceedsLimit { cost: 11, limit: 10 })));
        let long = vec![b'x'; 1025];
        assert!(matches!(l.check(&long, 1), Err(Error::Invalid(ratomic::Error::KeyTooLong { len: 1025, max: 1024 }))));
        assert!(matches!(l.args(Op::Allow, Some(1 << 62), 1), Err(Error::Invalid(_))));
        let err = l.check_batch([(&b"a"[..], 1), (&b"b"[..], 99)]).unwrap_err();
        assert!(matches!(err, Error::Invalid(ratomic::Error::InvalidRequest { index: 1, .. })), "{err}");
        let same = || [("a", Rule::parse("1/s").unwrap()), ("a", Rule::parse("2/s").unwrap())];
        assert_eq!(Limits::new(same()).unwrap_err(), Error::Invalid(ratomic::Limiter::new(same()).unwrap_err()));
        assert!(Limits::single(Rule::parse("1/s").unwrap()).unwrap().with_prefix("x{").is_err());
    }

    #[test]
    fn replies_decode_and_combine_as_in_memory() {
        let l = two();
        // burst allows with 9 left, daily denies with 0 left.
        let reply = [0, 1, 9, 10, 0, 100_000, 0, 0, 1000, 7_000_000, 7_000_000];
        let d = l.decode(&reply).unwrap();
        assert!(!d.allowed());
        assert_eq!(d.decision.remaining, 0);
        assert_eq!(d.decision.limit, 1000);
        assert_eq!(d.decision.retry_after, Duration::from_secs(7));
        assert_eq!(d.decision.reset_after, Duration::from_secs(7));
        assert_eq!(d.denied_by().collect::<Vec<_>>(), ["daily"]);
        assert_eq!(d.get("burst").unwrap().remaining, 9);
        assert!(l.decode(&[1, 2, 3]).is_err());
        assert!(l.decode(&[1, 1, 9, 10, 0, 100_000, 0, 0, 1000, 7_000_000, 7_000_000]).is_err(), "verdict mismatch");
        assert_eq!(l.decode_refund(&[2]).unwrap(), 2);
        assert!(l.decode_refund(&[3]).is_err());
    }
}
