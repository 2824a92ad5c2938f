//! A stack of limiters on different keys — per IP, per user, global — in
//! one all-or-nothing call.

use std::fmt;
use std::sync::Arc;

use crate::algorithm::{Algorithm, Charge};
use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::direct::Direct;
use crate::error::{Error, Result};
use crate::keyed::Keyed;
use crate::limiter::{Entries, Entry, Limiter, MultiDecision, Receipts};
use crate::rate::MAX_NANOS;

mod private {
    pub trait Sealed {}
}

/// A limiter that can stand in a [`Stack`]: [`TokenBucket`](crate::TokenBucket),
/// [`FixedWindow`](crate::FixedWindow), [`SlidingWindow`](crate::SlidingWindow)
/// and [`Limiter`] over byte keys, and the direct (keyless) buckets.
///
/// Sealed; its methods are the stack's business.
pub trait StackMember: private::Sealed + Send + Sync {
    #[doc(hidden)]
    fn validate(&self, key: &[u8], cost: u64) -> Result<()>;
    #[doc(hidden)]
    fn charge(&self, key: &[u8], cost: u64, now: u64) -> Result<(Decision, Receipt)>;
    #[doc(hidden)]
    fn peek(&self, key: &[u8], cost: u64, now: u64) -> Result<Decision>;
    #[doc(hidden)]
    fn give_back(&self, key: &[u8], receipt: &Receipt);
}

/// What a member stored when it charged a call: what giving it back needs.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct Receipt(Inner);

#[derive(Clone, Debug)]
enum Inner {
    Nothing,
    Word(Charge),
    Limits(Box<Receipts>),
}

impl<A: Algorithm, C: Clock> private::Sealed for Keyed<A, [u8], C> {}
impl<A: Algorithm, C: Clock> StackMember for Keyed<A, [u8], C> {
    fn validate(&self, key: &[u8], cost: u64) -> Result<()> {
        Keyed::validate(self, key, cost)
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
}

impl<C: Clock> private::Sealed for Limiter<[u8], C> {}
impl<C: Clock> StackMember for Limiter<[u8], C> {
    fn validate(&self, key: &[u8], cost: u64) -> Result<()> {
        Limiter::validate(self, key, cost)
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
}

impl<A: Algorithm, C: Clock> private::Sealed for Direct<A, C> {}
/// The key is ignored: a direct bucket is one limit for everything.
impl<A: Algorithm, C: Clock> StackMember for Direct<A, C> {
    fn validate(&self, _key: &[u8], cost: u64) -> Result<()> {
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
}

/// Several limiters, each on its own key, decided all or nothing: say 100/s
/// per IP, 10/s per user and 10 000/s for the whole service. A call passes
/// only if every member allows it; then every member is charged, otherwise
/// none is (the same charge-then-give-back protocol as [`Limiter`]: a call
/// may be denied spuriously while another's tokens are on their way back,
/// never over-granted).
///
/// Members are shared (`Arc`), so the same limiter can also be used on its
/// own or in other stacks. The stack reads one clock for the whole call and
/// passes that time to every member, so members should share its timeline:
/// every [`MonotonicClock`] does; [`ManualClock`](crate::ManualClock) clones do.
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

impl<C: Clock> fmt::Debug for Stack<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stack").field("members", &self.names).finish_non_exhaustive()
    }
}

impl Stack {
    /// Starts building a stack.
    pub fn builder() -> StackBuilder {
        StackBuilder { members: Vec::new(), clock: MonotonicClock::new() }
    }
}

impl<C: Clock> Stack<C> {
    /// The members' names, in order.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.names.iter().map(|n| &**n)
    }

    /// The clock's reading now.
    #[inline]
    pub fn now(&self) -> u64 {
        self.clock.now().min(MAX_NANOS)
    }

    /// One token from every member, each on its key (`keys[i]` for member
    /// `i`; a direct bucket ignores its key), or from none.
    pub fn allow<Q: AsRef<[u8]>>(&self, keys: &[Q]) -> Result<MultiDecision<'_>> {
        self.allow_at(keys, 1, self.now())
    }

    /// `cost` from every member, or from none.
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
    pub fn allow_at<Q: AsRef<[u8]>>(&self, keys: &[Q], cost: u64, now: u64) -> Result<MultiDecision<'_>> {
        self.validate(keys, cost)?;
        let mut entries = Entries::new();
        let mut denied = false;
        for (member, key) in self.members.iter().zip(keys) {
            let decision = member.peek(key.as_ref(), cost, now)?;
            denied |= !decision.allowed;
            entries.push(Entry::new(&decision));
        }
        if denied || cost == 0 {
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
                break;
            }
            receipts.push((k, receipt));
        }
        Ok(MultiDecision::combine(entries, self.mask(), &self.names))
    }

    /// What `allow` would answer, changing nothing.
    pub fn peek<Q: AsRef<[u8]>>(&self, keys: &[Q]) -> Result<MultiDecision<'_>> {
        self.peek_at(keys, 1, self.now())
    }

    /// What `allow_n` would answer at `now`, changing nothing.
    pub fn peek_at<Q: AsRef<[u8]>>(&self, keys: &[Q], cost: u64, now: u64) -> Result<MultiDecision<'_>> {
        self.validate(keys, cost)?;
        let mut entries = Entries::new();
        for (member, key) in self.members.iter().zip(keys) {
            entries.push(Entry::new(&member.peek(key.as_ref(), cost, now)?));
        }
        Ok(MultiDecision::combine(entries, self.mask(), &self.names))
    }

    /// Every member, as a [`MultiDecision`]'s mask (at most 16 members).
    fn mask(&self) -> u16 {
        (((1u32 << self.members.len()) - 1) & 0xffff) as u16
    }

    /// Every error is found before anything is charged.
    fn validate<Q: AsRef<[u8]>>(&self, keys: &[Q], cost: u64) -> Result<()> {
        if keys.len() != self.members.len() {
            return Err(Error::invalid("keys", keys.len(), "a stack call needs exactly one key per member"));
        }
        for (member, key) in self.members.iter().zip(keys) {
            member.validate(key.as_ref(), cost)?;
        }
        Ok(())
    }
}

/// Builds a [`Stack`].
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
    pub fn member<M: StackMember + 'static>(mut self, name: impl Into<String>, limiter: Arc<M>) -> Self {
        self.members.push((name.into(), limiter));
        self
    }

    /// Adds a member that is already a trait object.
    pub fn member_dyn(mut self, name: impl Into<String>, limiter: Arc<dyn StackMember>) -> Self {
        self.members.push((name.into(), limiter));
        self
    }

    /// The clock whose reading every call passes to all members.
    pub fn clock<C2: Clock>(self, clock: C2) -> StackBuilder<C2> {
        StackBuilder { members: self.members, clock }
    }

    /// The stack; errors on no members, more than 16, or an empty or
    /// duplicate name.
    pub fn build(self) -> Result<Stack<C>> {
        if self.members.is_empty() {
            return Err(Error::invalid("members", "[]", "a Stack needs at least one member"));
        }
        if self.members.len() > crate::limiter::MAX_LIMITS {
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
        let (names, members): (Vec<_>, Vec<_>) = self.members.into_iter().map(|(n, m)| (n.into_boxed_str(), m)).unzip();
        Ok(Stack { members: members.into_boxed_slice(), names: names.into_boxed_slice(), clock: self.clock })
    }
}
