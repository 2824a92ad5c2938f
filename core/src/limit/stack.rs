//! A stack of limiters on different keys — per IP, per user, global — in
//! one all-or-nothing call.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::clock::{checked, Clock, ClockId, MonotonicClock};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::headers::Policy;
use crate::limit::base;
use crate::limit::direct::Direct;
use crate::limit::keyed::Keyed;
use crate::limit::limiter::{Entries, Entry, Limiter, MultiDecision, Receipts};
use crate::store::Charge;
use crate::store::Mark;

mod private {
    pub trait Sealed {}
}

/// A limiter that can stand in a [`Stack`]: [`TokenBucket`](crate::TokenBucket),
/// [`FixedWindow`](crate::FixedWindow), [`SlidingWindow`](crate::SlidingWindow)
/// and [`Limiter`] over byte keys, and the direct (keyless) buckets.
///
/// Sealed; its methods are the stack's business.
///
/// ```
/// use std::sync::Arc;
/// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
///
/// let clock = ManualClock::new();
/// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
/// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
/// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
/// assert!(stack.allow(&["alice", ""])?.allowed());
/// # Ok::<(), ratomic::Error>(())
/// ```
pub trait StackMember: private::Sealed + Send + Sync + fmt::Debug {
    #[doc(hidden)]
    fn check(&self, key: &[u8], cost: u64) -> Result<()>;
    #[doc(hidden)]
    fn charge(&self, key: &[u8], cost: u64, now: u64) -> Result<(Decision, Receipt)>;
    #[doc(hidden)]
    fn peek(&self, key: &[u8], cost: u64, now: u64) -> Result<Decision>;
    #[doc(hidden)]
    fn give_back(&self, key: &[u8], receipt: &Receipt);
    #[doc(hidden)]
    fn refund(&self, key: &[u8], tokens: u64, now: u64) -> Result<()>;
    #[doc(hidden)]
    fn reset(&self, key: &[u8], now: u64) -> Result<()>;
    #[doc(hidden)]
    fn clock_id(&self) -> ClockId;
    /// The member's header policy named `name`: its one limit per its
    /// window; an error for a [`Limiter`] (several limits, no one policy).
    #[doc(hidden)]
    fn policy(&self, name: &str) -> Result<Policy>;
}

/// What a member stored when it charged a call: what giving it back needs.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct Receipt(Inner);

#[derive(Clone, Debug)]
enum Inner {
    Nothing,
    Word((Charge, Mark)),
    Limits(Box<Receipts>),
}

impl<A: Algorithm, C: Clock> private::Sealed for Keyed<A, [u8], C> {}
impl<A: Algorithm, C: Clock> StackMember for Keyed<A, [u8], C> {
    fn check(&self, key: &[u8], cost: u64) -> Result<()> {
        Keyed::check(self, key, cost)
    }
    fn charge(&self, key: &[u8], cost: u64, now: u64) -> Result<(Decision, Receipt)> {
        let (d, stored) = self.charge_at(key, cost, now)?;
        Ok((d, Receipt(stored.map_or(Inner::Nothing, Inner::Word))))
    }
    fn peek(&self, key: &[u8], cost: u64, now: u64) -> Result<Decision> {
        self.peek_at(key, cost, now)
    }
    fn give_back(&self, key: &[u8], receipt: &Receipt) {
        if let Inner::Word(charge) = receipt.0 {
            self.give_back_at(key, charge);
        }
    }
    fn refund(&self, key: &[u8], tokens: u64, now: u64) -> Result<()> {
        self.refund_at(key, tokens, now)
    }
    fn reset(&self, key: &[u8], now: u64) -> Result<()> {
        self.reset_at(key, now)
    }
    fn clock_id(&self) -> ClockId {
        self.clock().id()
    }
    fn policy(&self, name: &str) -> Result<Policy> {
        Policy::of(name, self.algorithm())
    }
}

impl<C: Clock> private::Sealed for Limiter<[u8], C> {}
impl<C: Clock> StackMember for Limiter<[u8], C> {
    fn check(&self, key: &[u8], cost: u64) -> Result<()> {
        Limiter::check(self, key, cost)
    }
    fn charge(&self, key: &[u8], cost: u64, now: u64) -> Result<(Decision, Receipt)> {
        let (d, receipts) = self.charge_at(key, cost, now)?;
        Ok((d.decision, Receipt(receipts.map_or(Inner::Nothing, |r| Inner::Limits(Box::new(r))))))
    }
    fn peek(&self, key: &[u8], cost: u64, now: u64) -> Result<Decision> {
        Ok(self.peek_at(key, cost, now)?.decision)
    }
    fn give_back(&self, key: &[u8], receipt: &Receipt) {
        if let Inner::Limits(r) = &receipt.0 {
            self.give_back_at(key, r);
        }
    }
    fn refund(&self, key: &[u8], tokens: u64, now: u64) -> Result<()> {
        self.refund_at(key, tokens, now)
    }
    fn reset(&self, key: &[u8], now: u64) -> Result<()> {
        self.reset_at(key, now)
    }
    fn clock_id(&self) -> ClockId {
        self.clock().id()
    }
    fn policy(&self, name: &str) -> Result<Policy> {
        Err(Error::invalid(
            "stack member",
            format!("{name:?}"),
            "is a Limiter: its limits have no single header policy (make each limit its own member to describe it in headers)",
        ))
    }
}

impl<A: Algorithm, C: Clock> private::Sealed for Direct<A, C> {}
/// The key is ignored: a direct bucket is one limit for everything.
impl<A: Algorithm, C: Clock> StackMember for Direct<A, C> {
    fn check(&self, _key: &[u8], cost: u64) -> Result<()> {
        self.algorithm().check_cost(cost)
    }
    fn charge(&self, _key: &[u8], cost: u64, now: u64) -> Result<(Decision, Receipt)> {
        let (d, stored) = self.charge_at(cost, now)?;
        Ok((d, Receipt(stored.map_or(Inner::Nothing, Inner::Word))))
    }
    fn peek(&self, _key: &[u8], cost: u64, now: u64) -> Result<Decision> {
        self.peek_at(cost, now)
    }
    fn give_back(&self, _key: &[u8], receipt: &Receipt) {
        if let Inner::Word(charge) = receipt.0 {
            self.give_back_at(charge);
        }
    }
    fn refund(&self, _key: &[u8], tokens: u64, now: u64) -> Result<()> {
        self.refund_at(tokens, now)
    }
    fn reset(&self, _key: &[u8], now: u64) -> Result<()> {
        checked(now)?;
        Direct::reset(self);
        Ok(())
    }
    fn clock_id(&self) -> ClockId {
        self.clock().id()
    }
    fn policy(&self, name: &str) -> Result<Policy> {
        Policy::of(name, self.algorithm())
    }
}

/// Several limiters, each on its own key, decided all or nothing: say 100/s
/// per IP, 10/s per user and 10 000/s for the whole service. A call passes
/// only if every member allows it; then every member is charged, otherwise
/// none is (the same charge-then-give-back protocol as [`Limiter`]: a call
/// may be denied spuriously while another's tokens are on their way back,
/// never over-granted; and a denied call keeps its charge on a member whose
/// key was refunded or reset while the call ran, to come back by refill).
///
/// Members are shared (`Arc`), so the same limiter can also be used on its
/// own or in other stacks. The stack reads one clock for the whole call and
/// passes that time to every member, so every member must read the stack's
/// timeline: [`build`](StackBuilder::build) refuses a member whose clock has
/// another [`ClockId`] (every [`MonotonicClock`] shares one;
/// [`ManualClock`](crate::ManualClock) clones share theirs).
///
/// ```
/// use std::sync::Arc;
/// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
///
/// let clock = ManualClock::new();
/// let per_ip = Arc::new(TokenBucket::builder(Quota::parse("3/s")?).clock(clock.clone()).build()?);
/// let per_user = Arc::new(TokenBucket::builder(Quota::parse("2/s")?).clock(clock.clone()).build()?);
/// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("1000/s")?, clock.clone()));
/// let stack = Stack::builder()
///     .member("ip", per_ip.clone())
///     .member("user", per_user)
///     .member("global", global)
///     .clock(clock)
///     .build()?;
///
/// assert!(stack.allow(&["10.0.0.1", "alice", ""])?.allowed());
/// assert!(stack.allow(&["10.0.0.1", "alice", ""])?.allowed());
/// let d = stack.allow(&["10.0.0.1", "alice", ""])?;
/// assert_eq!(d.denied_by().collect::<Vec<_>>(), ["user"]);
/// // The IP was not charged for the denied call: it has one token left.
/// assert_eq!(per_ip.peek_n("10.0.0.1", 0)?.remaining, 1);
/// # Ok::<(), ratomic::Error>(())
/// ```
pub struct Stack<C: Clock = MonotonicClock> {
    members: Box<[Arc<dyn StackMember>]>,
    names: Box<[Box<str>]>,
    clock: C,
}

/// Each member by name, as the member prints itself.
///
/// ```
/// use std::sync::Arc;
/// use ratomic::{DirectTokenBucket, Quota, Stack, TokenBucket};
///
/// let per_ip = Arc::new(TokenBucket::builder("3/s").build()?);
/// let global = Arc::new(DirectTokenBucket::new(Quota::parse("100/s")?));
/// let stack = Stack::builder().member("ip", per_ip).member("global", global).build()?;
/// assert_eq!(
///     format!("{stack:?}"),
///     "Stack { members: {\"ip\": TokenBucket { rule: token bucket 3 per 1s, keys: 0 }, \
///      \"global\": DirectTokenBucket { rule: token bucket 100 per 1s }} }"
/// );
/// # Ok::<(), ratomic::Error>(())
/// ```
impl<C: Clock> fmt::Debug for Stack<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Members<'a>(&'a [Box<str>], &'a [Arc<dyn StackMember>]);
        impl fmt::Debug for Members<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map().entries(self.0.iter().zip(self.1)).finish()
            }
        }
        f.debug_struct("Stack").field("members", &Members(&self.names, &self.members)).finish()
    }
}

impl Stack {
    /// Starts building a stack.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// assert_eq!(stack.names().collect::<Vec<_>>(), ["user", "global"]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn builder() -> StackBuilder {
        StackBuilder { members: Vec::new(), clock: MonotonicClock::new() }
    }
}

impl<C: Clock> Stack<C> {
    /// One header [`Policy`] per member, in order, named as the members:
    /// what [`Headers::multi`](crate::headers::Headers::multi) takes with
    /// this stack's decisions (one `RateLimit-Policy` and `RateLimit` item
    /// per member). Build them once, at setup. A [`Limiter`] member has
    /// several limits and no one policy: that is an error naming it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::headers::{Headers, Policy};
    /// use ratomic::{DirectTokenBucket, Quota, Stack, TokenBucket};
    ///
    /// let stack = Stack::builder()
    ///     .member("ip", Arc::new(TokenBucket::new(Quota::parse("100/min")?)))
    ///     .member("global", Arc::new(DirectTokenBucket::new(Quota::parse("1000/s")?)))
    ///     .build()?;
    /// let policies = stack.policies()?;
    /// let d = stack.allow(&["10.0.0.1", ""])?;
    /// assert_eq!(Headers::multi(&policies, &d)?.policy(), r#""ip";q=100;w=60, "global";q=1000;w=1"#);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// let policies = stack.policies()?;
    /// assert_eq!(policies.iter().map(|p| (p.name(), p.quota())).collect::<Vec<_>>(), [("user", 2), ("global", 100)]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn policies(&self) -> Result<Vec<Policy>> {
        self.members.iter().zip(self.names.iter()).map(|(m, n)| m.policy(n)).collect()
    }

    /// The members' names, in order.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// assert_eq!(stack.names().len(), 2);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.names.iter().map(|n| &**n)
    }

    /// The stack's clock: the one every member reads (as
    /// [`Keyed::clock`](crate::Keyed::clock) is a limiter's). A face that
    /// reads time itself, from a clock core cannot call, reads it here.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{Clock, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::starting_at(7);
    /// let member = Arc::new(TokenBucket::builder(Quota::parse("1/s")?).clock(clock.clone()).build()?);
    /// let stack = Stack::builder().member("ip", member).clock(clock.clone()).build()?;
    /// assert_eq!(stack.clock().id(), clock.id());
    /// assert_eq!(stack.clock().now(), 7);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{Clock, DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// clock.advance_nanos(3);
    /// assert_eq!(stack.clock().now(), 3);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The clock's reading now.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// clock.advance_nanos(3);
    /// assert_eq!(stack.now(), 3);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// One token from every member, each on its key (`keys[i]` for member
    /// `i`; a direct bucket ignores its key), or from none.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// assert!(stack.allow(&["alice", ""])?.allowed());
    /// assert!(stack.allow(&["alice"]).is_err(), "one key per member");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn allow<Q: AsRef<[u8]>>(&self, keys: &[Q]) -> Result<MultiDecision<'_>> {
        self.allow_at(keys, 1, self.now())
    }

    /// `cost` from every member, or from none.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// assert_eq!(stack.allow_n(&["alice", ""], 2)?.get("global").unwrap().remaining, 98);
    /// assert!(!stack.allow_n(&["alice", ""], 1)?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn allow_n<Q: AsRef<[u8]>>(&self, keys: &[Q], cost: u64) -> Result<MultiDecision<'_>> {
        self.allow_at(keys, cost, self.now())
    }

    /// [`allow_n`](Self::allow_n) at time `now`.
    ///
    /// Every member is asked first (a peek); if any denies, nothing is
    /// charged. Otherwise the members are charged tightest first (least
    /// remaining after the call), and if one denies after all (another call
    /// took its last tokens meanwhile) the members already charged are given
    /// back exactly what this call took, when nothing else has changed them
    /// since; a member that did change keeps the charge (a spurious denial
    /// later, never an over-grant).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// let now = stack.now();
    /// assert!(stack.allow_at(&["alice", ""], 2, now)?.allowed());
    /// assert!(stack.allow_at(&["alice", ""], 1, now + 500_000_000)?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn allow_at<Q: AsRef<[u8]>>(&self, keys: &[Q], cost: u64, now: u64) -> Result<MultiDecision<'_>> {
        let now = checked(now)?;
        self.check(keys, cost)?;
        let mut entries = Entries::new();
        let mut denied = false;
        for (member, key) in self.members.iter().zip(keys) {
            let decision = member.peek(key.as_ref(), cost, now)?;
            denied |= !decision.allowed;
            entries.push(Entry::new(&decision));
        }
        if denied {
            self.uncharge(keys, &mut entries, now)?;
            return Ok(MultiDecision::combine(entries, self.mask(), &self.names));
        }
        if cost == 0 {
            return Ok(MultiDecision::combine(entries, self.mask(), &self.names));
        }
        let count = self.members.len();
        let mut order: Vec<usize> = (0..count).collect();
        order.sort_by_key(|&k| entries[k].remaining());
        let mut receipts: Vec<(usize, Receipt)> = Vec::with_capacity(count);
        for k in order {
            let key = keys[k].as_ref();
            let (decision, receipt) = self.members[k].charge(key, cost, now)?;
            entries[k] = Entry::new(&decision);
            if !decision.allowed {
                for (j, receipt) in &receipts {
                    self.members[*j].give_back(keys[*j].as_ref(), receipt);
                }
                self.uncharge(keys, &mut entries, now)?;
                break;
            }
            receipts.push((k, receipt));
        }
        Ok(MultiDecision::combine(entries, self.mask(), &self.names))
    }

    /// What `allow` would answer, changing nothing.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// assert_eq!(stack.peek(&["alice", ""])?.get("user").unwrap().remaining, 1);
    /// assert_eq!(stack.peek(&["alice", ""])?.get("user").unwrap().remaining, 1, "nothing taken");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn peek<Q: AsRef<[u8]>>(&self, keys: &[Q]) -> Result<MultiDecision<'_>> {
        self.peek_at(keys, 1, self.now())
    }

    /// What `allow_n` would answer at `now`, changing nothing.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// assert!(stack.peek_at(&["alice", ""], 2, stack.now())?.allowed());
    /// let _ = stack.allow_n(&["alice", ""], 2)?;
    /// assert_eq!(stack.peek_at(&["alice", ""], 1, stack.now())?.denied_by().collect::<Vec<_>>(), ["user"]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn peek_at<Q: AsRef<[u8]>>(&self, keys: &[Q], cost: u64, now: u64) -> Result<MultiDecision<'_>> {
        let now = checked(now)?;
        self.check(keys, cost)?;
        let mut entries = Entries::new();
        for (member, key) in self.members.iter().zip(keys) {
            entries.push(Entry::new(&member.peek(key.as_ref(), cost, now)?));
        }
        if entries.iter().any(|e| !e.allowed()) {
            self.uncharge(keys, &mut entries, now)?; // as allow would answer
        }
        Ok(MultiDecision::combine(entries, self.mask(), &self.names))
    }

    /// A denied call charges no member: each member that would have allowed
    /// it answers for its key as it stands (a cost-0 peek), still allowed,
    /// so no entry reports tokens the call never took.
    #[inline(never)]
    fn uncharge<Q: AsRef<[u8]>>(&self, keys: &[Q], entries: &mut Entries, now: u64) -> Result<()> {
        for (k, entry) in entries.iter_mut().enumerate() {
            if entry.allowed() {
                *entry = Entry::uncharged_member(&self.members[k].peek(keys[k].as_ref(), 0, now)?);
            }
        }
        Ok(())
    }

    /// Every member, as a [`MultiDecision`]'s mask (at most 16 members).
    fn mask(&self) -> u16 {
        (((1u32 << self.members.len()) - 1) & 0xffff) as u16
    }

    /// Gives `tokens` back to every member, each on its key (never above
    /// full): for work that was admitted but not done.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// let _ = stack.allow_n(&["alice", ""], 2)?;
    /// stack.refund(&["alice", ""], 1)?;
    /// assert!(stack.allow(&["alice", ""])?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn refund<Q: AsRef<[u8]>>(&self, keys: &[Q], tokens: u64) -> Result<()> {
        self.refund_at(keys, tokens, self.now())
    }

    /// [`refund`](Self::refund) at time `now`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// let _ = stack.allow_n(&["alice", ""], 2)?;
    /// stack.refund_at(&["alice", ""], 2, stack.now())?;
    /// assert!(stack.allow_n(&["alice", ""], 2)?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn refund_at<Q: AsRef<[u8]>>(&self, keys: &[Q], tokens: u64, now: u64) -> Result<()> {
        let now = checked(now)?;
        self.check(keys, 0)?;
        for (member, key) in self.members.iter().zip(keys) {
            member.refund(key.as_ref(), tokens, now)?;
        }
        Ok(())
    }

    /// Forgets every member's key: each is full again (a direct bucket
    /// member is reset for everyone).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// let _ = stack.allow_n(&["alice", ""], 2)?;
    /// stack.reset(&["alice", ""])?;
    /// assert!(stack.allow_n(&["alice", ""], 2)?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn reset<Q: AsRef<[u8]>>(&self, keys: &[Q]) -> Result<()> {
        self.reset_at(keys, self.now())
    }

    /// [`reset`](Self::reset) at time `now`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// let _ = stack.allow_n(&["alice", ""], 2)?;
    /// stack.reset_at(&["alice", ""], stack.now())?;
    /// assert!(stack.allow(&["alice", ""])?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn reset_at<Q: AsRef<[u8]>>(&self, keys: &[Q], now: u64) -> Result<()> {
        let now = checked(now)?;
        self.check(keys, 0)?;
        for (member, key) in self.members.iter().zip(keys) {
            member.reset(key.as_ref(), now)?;
        }
        Ok(())
    }

    /// `cost` from every member, waiting out denials; see
    /// [`Keyed::acquire`](crate::Keyed::acquire).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{Clock, DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// let _ = stack.allow_n(&["alice", ""], 2)?;
    /// assert!(stack.acquire(&["alice", ""], 1, None)?.allowed()); // the manual clock moves itself
    /// assert_eq!(clock.now(), 500_000_000);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn acquire<Q: AsRef<[u8]>>(
        &self,
        keys: &[Q],
        cost: u64,
        timeout: Option<Duration>,
    ) -> Result<MultiDecision<'_>> {
        base::acquire(timeout, || self.allow_n(keys, cost), answer, |d| self.clock.sleep(d))
    }

    /// [`acquire`](Self::acquire) for async code on any runtime; see
    /// [`Keyed::acquire_with`](crate::Keyed::acquire_with).
    pub async fn acquire_with<Q, F, Fut>(
        &self,
        keys: &[Q],
        cost: u64,
        timeout: Option<Duration>,
        sleep: F,
    ) -> Result<MultiDecision<'_>>
    where
        Q: AsRef<[u8]>,
        F: FnMut(Duration) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        base::acquire_async(timeout, || self.allow_n(keys, cost), answer, sleep).await
    }

    /// Checks a call's arguments against every member (one key per member,
    /// each key's length, the cost against each limit), changing nothing.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// assert!(stack.check(&["alice", ""], 2).is_ok());
    /// assert!(stack.check(&["alice", ""], 3).is_err(), "more than the user bucket holds");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn check<Q: AsRef<[u8]>>(&self, keys: &[Q], cost: u64) -> Result<()> {
        if keys.len() != self.members.len() {
            return Err(Error::invalid("keys", keys.len(), "a stack call needs exactly one key per member"));
        }
        for (member, key) in self.members.iter().zip(keys) {
            member.check(key.as_ref(), cost)?;
        }
        Ok(())
    }
}

/// Builds a [`Stack`].
///
/// ```
/// use std::sync::Arc;
/// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
///
/// let clock = ManualClock::new();
/// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
/// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
/// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
/// assert_eq!(stack.names().count(), 2);
/// # Ok::<(), ratomic::Error>(())
/// ```
#[must_use = "call .build() to get the stack"]
pub struct StackBuilder<C = MonotonicClock> {
    members: Vec<(String, Arc<dyn StackMember>)>,
    clock: C,
}

impl<C> fmt::Debug for StackBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.members.iter().map(|(n, _)| n).collect();
        f.debug_struct("StackBuilder").field("members", &names).finish_non_exhaustive()
    }
}

impl<C: Clock> StackBuilder<C> {
    /// Adds a member; it is charged in the order added.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_user = Arc::new(TokenBucket::builder("2/s").clock(clock.clone()).build()?);
    /// let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/s")?, clock.clone()));
    /// let stack = Stack::builder().member("user", per_user).member("global", global).clock(clock.clone()).build()?;
    /// assert!(stack.allow(&["bob", ""])?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn member<M: StackMember + 'static>(mut self, name: impl Into<String>, limiter: Arc<M>) -> Self {
        self.members.push((name.into(), limiter));
        self
    }

    /// Adds a member that is already a trait object.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{Quota, Stack, StackMember, TokenBucket};
    ///
    /// // Members chosen at run time, as trait objects.
    /// let members: Vec<(&str, Arc<dyn StackMember>)> = vec![("ip", Arc::new(TokenBucket::new(Quota::parse("10/s")?)))];
    /// let stack = members.into_iter().fold(Stack::builder(), |b, (n, m)| b.member_dyn(n, m)).build()?;
    /// assert!(stack.allow(&["10.0.0.1"])?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn member_dyn(mut self, name: impl Into<String>, limiter: Arc<dyn StackMember>) -> Self {
        self.members.push((name.into(), limiter));
        self
    }

    /// The clock whose reading every call passes to all members.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{ManualClock, Stack, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let member = Arc::new(TokenBucket::builder("1/s").clock(clock.clone()).build()?);
    /// assert!(Stack::builder().member("m", member.clone()).build().is_err(), "the stack reads another clock");
    /// assert!(Stack::builder().member("m", member).clock(clock).build().is_ok());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn clock<C2: Clock>(self, clock: C2) -> StackBuilder<C2> {
        StackBuilder { members: self.members, clock }
    }

    /// The stack; errors on no members, more than 16, an empty or duplicate
    /// name, or a member whose clock is not the stack's (see [`ClockId`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ratomic::{Stack, TokenBucket};
    ///
    /// assert!(Stack::builder().build().is_err(), "no members");
    /// let m = Arc::new(TokenBucket::builder("1/s").build()?);
    /// assert!(Stack::builder().member("a", m.clone()).member("a", m).build().is_err(), "a name used twice");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn build(self) -> Result<Stack<C>> {
        if self.members.is_empty() {
            return Err(Error::invalid("members", "[]", "a Stack needs at least one member"));
        }
        if self.members.len() > crate::limit::limiter::MAX_LIMITS {
            return Err(Error::invalid("members", self.members.len(), "a Stack holds at most 16 members"));
        }
        for (i, (name, _)) in self.members.iter().enumerate() {
            if name.is_empty() {
                return Err(Error::invalid("member name", "\"\"", "must not be empty"));
            }
            if self.members[..i].iter().any(|(n, _)| n == name) {
                return Err(Error::invalid("member name", format!("{name:?}"), "is used twice"));
            }
        }
        let id = self.clock.id();
        if let Some((name, _)) = self.members.iter().find(|(_, m)| m.clock_id() != id) {
            return Err(Error::invalid(
                "member",
                format!("{name:?}"),
                "reads another clock than the stack: the stack passes its one reading to every member, so all must \
                 read the same clock (give the stack that clock with .clock(...))",
            ));
        }
        let (names, members): (Vec<_>, Vec<_>) = self.members.into_iter().map(|(n, m)| (n.into_boxed_str(), m)).unzip();
        Ok(Stack { members: members.into_boxed_slice(), names: names.into_boxed_slice(), clock: self.clock })
    }
}

/// `(allowed, retry_after)` of a decision, for the acquire loops.
fn answer(d: &MultiDecision<'_>) -> (bool, Duration) {
    (d.decision.allowed, d.decision.retry_after)
}
