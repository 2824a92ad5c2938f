//! How a request's key is found: the client's address (the peer's, or
//! what trusted proxies wrote in `X-Forwarded-For`, `Forwarded` or
//! `X-Real-IP`), a header, one key for all, or a closure.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::{Extensions, HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

/// A request's head as the layer reads it: a whole request (nothing moved
/// when no function of the user's needs its `Parts`) or its `Parts`.
pub(crate) trait Head {
    fn headers(&self) -> &HeaderMap;
    fn extensions(&self) -> &Extensions;
    fn extensions_mut(&mut self) -> &mut Extensions;
    /// The `Parts`, for the user's functions (`None` for a whole request).
    fn parts(&self) -> Option<&http::request::Parts>;
}

impl Head for http::request::Parts {
    fn headers(&self) -> &HeaderMap {
        &self.headers
    }
    fn extensions(&self) -> &Extensions {
        &self.extensions
    }
    fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.extensions
    }
    fn parts(&self) -> Option<&http::request::Parts> {
        Some(self)
    }
}

impl<B> Head for http::Request<B> {
    fn headers(&self) -> &HeaderMap {
        self.headers()
    }
    fn extensions(&self) -> &Extensions {
        self.extensions()
    }
    fn extensions_mut(&mut self) -> &mut Extensions {
        self.extensions_mut()
    }
    fn parts(&self) -> Option<&http::request::Parts> {
        None
    }
}

type KeyFn = dyn Fn(&http::request::Parts) -> Option<Vec<u8>> + Send + Sync;
type KeysFn = dyn Fn(&http::request::Parts) -> Option<Vec<Vec<u8>>> + Send + Sync;

#[derive(Clone)]
pub(crate) enum Source {
    ClientIp(ClientIp),
    Header(HeaderName),
    Global,
    Func(Arc<KeyFn>),
    PerMember(Arc<KeysFn>),
}

/// How the layer finds a request's key.
#[derive(Clone)]
pub struct KeyBy {
    pub(crate) source: Source,
}

impl std::fmt::Debug for KeyBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            Source::ClientIp(ip) => f.debug_tuple("KeyBy::client_ip").field(ip).finish(),
            Source::Header(name) => f.debug_tuple("KeyBy::header").field(name).finish(),
            Source::Global => f.write_str("KeyBy::global"),
            Source::Func(_) => f.write_str("KeyBy::func(..)"),
            Source::PerMember(_) => f.write_str("KeyBy::per_member(..)"),
        }
    }
}

impl KeyBy {
    /// The client's address (the default): axum's `ConnectInfo<SocketAddr>`
    /// or a `SocketAddr` extension, IPv6 grouped by /64. Never reads
    /// `X-Forwarded-For`, `Forwarded` or `X-Real-IP`: a client writes them
    /// as it likes.
    pub fn peer_ip() -> Self {
        Self::client_ip(ClientIp::peer())
    }

    /// The client's address behind `proxies` trusted proxies that append to
    /// `X-Forwarded-For`: the `proxies`-th address from the right (the
    /// peer's own address when the header has fewer). Same as
    /// `KeyBy::client_ip(ClientIp::behind(proxies, ProxyHeader::XForwardedFor))`.
    pub fn peer_ip_behind(proxies: usize) -> Self {
        Self::client_ip(ClientIp::behind(proxies, ProxyHeader::XForwardedFor))
    }

    /// [`peer_ip_behind`](Self::peer_ip_behind), with IPv6 addresses grouped
    /// by their first `ipv6_prefix` bits (at most 128).
    pub fn peer_ip_with(proxies: usize, ipv6_prefix: u8) -> Self {
        Self::client_ip(ClientIp::behind(proxies, ProxyHeader::XForwardedFor).ipv6_prefix(ipv6_prefix))
    }

    /// The client's address as `ip` finds it: the peer's, or what the
    /// trusted proxies in front wrote in the header they write.
    ///
    /// ```
    /// use ratomic_tower::{ClientIp, KeyBy, ProxyHeader};
    ///
    /// // Behind one proxy that writes `Forwarded: for=…` (RFC 7239).
    /// let key = KeyBy::client_ip(ClientIp::behind(1, ProxyHeader::Forwarded));
    /// ```
    pub fn client_ip(ip: ClientIp) -> Self {
        KeyBy { source: Source::ClientIp(ip) }
    }

    /// One key for every request: a limit on the whole service (or route).
    ///
    /// ```
    /// use ratomic_tower::KeyBy;
    /// let everyone = KeyBy::global();
    /// ```
    pub fn global() -> Self {
        KeyBy { source: Source::Global }
    }

    /// The value of header `name` (a request without it has no key).
    pub fn header(name: HeaderName) -> Self {
        KeyBy { source: Source::Header(name) }
    }

    /// Whatever `f` returns for the request's head.
    pub fn func(f: impl Fn(&http::request::Parts) -> Option<Vec<u8>> + Send + Sync + 'static) -> Self {
        KeyBy { source: Source::Func(Arc::new(f)) }
    }

    /// For a [`Stack`](ratomic::Stack): one key per member, in the stack's
    /// order, from `f` (say the peer address for a per-IP member, a user id
    /// for a per-user one, anything for a direct member). With any other
    /// key, every member is on the same key. A request for which `f` gives
    /// no keys is refused with a 400; the wrong number of keys is a request
    /// the limiter cannot judge (a 400).
    /// [`RateLimitLayer::key`](crate::RateLimitLayer::key) panics if the
    /// limiter is not a stack.
    pub fn per_member(f: impl Fn(&http::request::Parts) -> Option<Vec<Vec<u8>>> + Send + Sync + 'static) -> Self {
        KeyBy { source: Source::PerMember(Arc::new(f)) }
    }

    /// The client-address key's settings, if this is one.
    pub(crate) fn client(&self) -> Option<&ClientIp> {
        match &self.source {
            Source::ClientIp(ip) => Some(ip),
            _ => None,
        }
    }

    /// Whether the key is a function of the user's (which takes `Parts`).
    pub(crate) fn needs_parts(&self) -> bool {
        matches!(self.source, Source::Func(_) | Source::PerMember(_))
    }

    /// The request's key(s); `None` when it has none (or a function of the
    /// user's is given no `Parts`).
    #[inline]
    pub(crate) fn find<'p, H: Head>(&self, head: &'p H) -> Option<Found<'p>> {
        Some(match &self.source {
            Source::ClientIp(ip) => Found::One(KeyBytes::Inline(ip.inline(head)?)),
            Source::Header(name) => Found::One(KeyBytes::Borrowed(head.headers().get(name)?.as_bytes())),
            Source::Global => Found::One(KeyBytes::Borrowed(b"")),
            Source::Func(f) => Found::One(KeyBytes::Owned(f(head.parts()?)?)),
            Source::PerMember(f) => Found::Each(f(head.parts()?)?),
        })
    }
}

/// A request's key, found without allocating where it can be.
pub(crate) enum Found<'p> {
    One(KeyBytes<'p>),
    Each(Vec<Vec<u8>>),
}

impl Found<'_> {
    pub(crate) fn keys(&self) -> Keys<'_> {
        match self {
            Found::One(k) => Keys::One(k.as_bytes()),
            Found::Each(keys) => Keys::Each(keys),
        }
    }

    /// The key(s) kept past the request's head (for a refund).
    pub(crate) fn retain(self) -> Retained {
        match self {
            Found::One(k) => Retained::One(SmallVec::from_slice(k.as_bytes())),
            Found::Each(keys) => Retained::Each(keys),
        }
    }
}

pub(crate) enum KeyBytes<'p> {
    Inline(Inline),
    Borrowed(&'p [u8]),
    Owned(Vec<u8>),
}

impl KeyBytes<'_> {
    fn as_bytes(&self) -> &[u8] {
        match self {
            KeyBytes::Inline(k) => k.as_bytes(),
            KeyBytes::Borrowed(k) => k,
            KeyBytes::Owned(k) => k,
        }
    }
}

/// A request's key(s) as the limiter takes them.
#[derive(Clone, Copy, Debug)]
pub enum Keys<'a> {
    /// One key (every member of a stack on it).
    One(&'a [u8]),
    /// One key per member of a stack.
    Each(&'a [Vec<u8>]),
}

/// Keys kept for a refund after the request went on.
#[derive(Debug)]
pub(crate) enum Retained {
    One(SmallVec<[u8; 48]>),
    Each(Vec<Vec<u8>>),
}

impl Retained {
    pub(crate) fn keys(&self) -> Keys<'_> {
        match self {
            Retained::One(k) => Keys::One(k),
            Retained::Each(keys) => Keys::Each(keys),
        }
    }
}

/// The longest client key: an IPv6 network and its prefix,
/// `ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128` (43 bytes).
const INLINE: usize = 48;

/// A client key in a buffer on the stack.
pub(crate) struct Inline {
    bytes: [u8; INLINE],
    len: u8,
}

impl Inline {
    fn new() -> Self {
        Inline { bytes: [0; INLINE], len: 0 }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Write for Inline {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let at = usize::from(self.len);
        let end = at + s.len();
        self.bytes.get_mut(at..end).ok_or(std::fmt::Error)?.copy_from_slice(s.as_bytes());
        self.len = end as u8;
        Ok(())
    }
}

/// Which header the trusted proxies in front write the client's address in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, …`: each proxy appends the address
    /// it was reached from (nginx's `$proxy_add_x_forwarded_for`, HAProxy's
    /// `option forwardfor`, most load balancers). The client is the n-th
    /// address from the right of all its field lines, taken in order; a port
    /// after an address is dropped.
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239): as `X-Forwarded-For`,
    /// one element per hop, the `for` parameter of the n-th element from
    /// the right (quoted or not, IPv6 in brackets, a port dropped; `unknown`
    /// and obfuscated identifiers name no address).
    Forwarded,
    /// `X-Real-IP: client`: one address, set by the proxy in front (nginx's
    /// `proxy_set_header X-Real-IP $remote_addr`), which overwrites what a
    /// client sent. The last field line counts; any number of proxies ≥ 1
    /// trusts it.
    XRealIp,
}

impl ProxyHeader {
    pub(crate) const ALL: [HeaderName; 3] =
        [HeaderName::from_static("x-forwarded-for"), http::header::FORWARDED, HeaderName::from_static("x-real-ip")];

    fn name(self) -> &'static str {
        match self {
            ProxyHeader::XForwardedFor => "x-forwarded-for",
            ProxyHeader::Forwarded => "forwarded",
            ProxyHeader::XRealIp => "x-real-ip",
        }
    }
}

/// Where the client's address comes from: the connection's peer, or
/// behind a number of trusted proxies, the header they write. IPv6
/// addresses are grouped by their first 64 bits unless told otherwise.
///
/// Only the proxies you run can be trusted: anything left of what they
/// wrote is whatever the client sent. With no proxy trusted (the default),
/// no header is read.
///
/// ```
/// use ratomic_tower::{ClientIp, ProxyHeader};
///
/// let parts = http::Request::get("/")
///     .header("forwarded", r#"for=198.51.100.7, for="[2001:db8::1]:4711""#)
///     .extension(std::net::SocketAddr::from(([10, 0, 0, 1], 443)))
///     .body(())
///     .unwrap()
///     .into_parts()
///     .0;
/// assert_eq!(ClientIp::peer().address(&parts), Some("10.0.0.1".parse().unwrap()));
/// let one = ClientIp::behind(1, ProxyHeader::Forwarded);
/// assert_eq!(one.address(&parts), Some("2001:db8::1".parse().unwrap()));
/// assert_eq!(one.key(&parts).unwrap(), b"2001:db8::/64");
/// let two = ClientIp::behind(2, ProxyHeader::Forwarded).ipv6_prefix(128);
/// assert_eq!(two.key(&parts).unwrap(), b"198.51.100.7");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientIp {
    proxies: usize,
    header: ProxyHeader,
    ipv6_prefix: u8,
}

impl Default for ClientIp {
    fn default() -> Self {
        Self::peer()
    }
}

impl ClientIp {
    /// The connection's peer: axum's `ConnectInfo<SocketAddr>` or a
    /// `SocketAddr` extension.
    pub const fn peer() -> Self {
        ClientIp { proxies: 0, header: ProxyHeader::XForwardedFor, ipv6_prefix: 64 }
    }

    /// Behind `proxies` trusted proxies writing `header` (`proxies == 0` is
    /// [`peer`](Self::peer): no header read).
    pub const fn behind(proxies: usize, header: ProxyHeader) -> Self {
        ClientIp { proxies, header, ipv6_prefix: 64 }
    }

    /// Groups IPv6 addresses by their first `bits` (at most 128: above is
    /// the whole address); IPv4 addresses stay whole.
    pub const fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.ipv6_prefix = if bits > 128 { 128 } else { bits };
        self
    }

    /// How many proxies are trusted.
    pub const fn proxies(&self) -> usize {
        self.proxies
    }

    /// The client's address, or `None` when the request carries no peer
    /// address.
    pub fn address(&self, parts: &http::request::Parts) -> Option<IpAddr> {
        self.address_in(parts)
    }

    fn address_in<H: Head>(&self, head: &H) -> Option<IpAddr> {
        let headers = head.headers();
        let forwarded = match (self.proxies, self.header) {
            (0, _) => None,
            (n, ProxyHeader::XForwardedFor) => nth_from_right(headers, ProxyHeader::XForwardedFor, n, xff_hops),
            (n, ProxyHeader::Forwarded) => nth_from_right(headers, ProxyHeader::Forwarded, n, forwarded_hops),
            (_, ProxyHeader::XRealIp) => {
                let last = headers.get_all("x-real-ip").iter().next_back();
                last.and_then(|v| v.to_str().ok()).and_then(|v| hop_address(v.trim()))
            }
        };
        forwarded.or_else(|| peer(head.extensions()))
    }

    /// The client's key: its address as text, IPv6 grouped by the prefix
    /// (`2001:db8::/64`).
    pub fn key(&self, parts: &http::request::Parts) -> Option<Vec<u8>> {
        self.inline(parts).map(|k| k.as_bytes().to_vec())
    }

    #[inline]
    fn inline<H: Head>(&self, head: &H) -> Option<Inline> {
        self.address_in(head).map(|ip| inline_key(ip, self.ipv6_prefix))
    }

    /// Whether a request carries a forwarding header that is not read
    /// (no proxy trusted).
    pub(crate) fn ignores_forwarding(&self, headers: &HeaderMap) -> bool {
        self.proxies == 0 && ProxyHeader::ALL.iter().any(|h| headers.contains_key(h))
    }
}

/// The key [`KeyBy::peer_ip_with`] gives a request, for a key function
/// that combines it with others (say [`KeyBy::per_member`]'s per-IP
/// member): the client's address behind `proxies` trusted proxies (from
/// `X-Forwarded-For`), IPv6 grouped by its first `ipv6_prefix` bits (at
/// most 128). `None` when the request carries no peer address.
/// [`ClientIp::key`] does the same for the other headers.
///
/// ```
/// use ratomic_tower::{peer_key, KeyBy};
///
/// // Per client (the peer address, IPv6 by /64), per user, and global.
/// let keys = KeyBy::per_member(|parts| {
///     let user = parts.headers.get("x-user")?.as_bytes().to_vec();
///     Some(vec![peer_key(parts, 0, 64)?, user, Vec::new()])
/// });
/// ```
pub fn peer_key(parts: &http::request::Parts, proxies: usize, ipv6_prefix: u8) -> Option<Vec<u8>> {
    ClientIp::behind(proxies, ProxyHeader::XForwardedFor).ipv6_prefix(ipv6_prefix).key(parts)
}

pub(crate) fn peer(extensions: &Extensions) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(addr.ip());
    }
    extensions.get::<SocketAddr>().map(SocketAddr::ip)
}

/// The field lines of `header`, in order, as text (a line that is not is
/// skipped).
fn lines(headers: &HeaderMap, header: ProxyHeader) -> impl DoubleEndedIterator<Item = &str> {
    headers.get_all(header.name()).into_iter().filter_map(|v: &HeaderValue| v.to_str().ok())
}

/// The address in the `n`-th hop from the right of all of `header`'s
/// lines; `None` when there are fewer hops or that one names no address.
fn nth_from_right<'p>(
    headers: &'p HeaderMap,
    header: ProxyHeader,
    n: usize,
    hops: fn(&'p str, &mut SmallVec<[&'p str; 8]>),
) -> Option<IpAddr> {
    let mut all: SmallVec<[&str; 8]> = SmallVec::new();
    for line in lines(headers, header) {
        hops(line, &mut all);
    }
    let hop = all.len().checked_sub(n).map(|i| all[i])?;
    hop_address(hop)
}

fn xff_hops<'p>(line: &'p str, out: &mut SmallVec<[&'p str; 8]>) {
    out.extend(line.split(',').map(str::trim).filter(|h| !h.is_empty()));
}

/// RFC 7239 elements of one `Forwarded` line, each as its `for` value
/// (unquoted; `""` when it has none): commas and semicolons inside a
/// quoted string do not split.
fn forwarded_hops<'p>(line: &'p str, out: &mut SmallVec<[&'p str; 8]>) {
    split_unquoted(line, b',', |element| {
        let element = element.trim();
        if !element.is_empty() {
            out.push(for_value(element));
        }
    });
}

/// The `for` parameter of one forwarded element, without its quotes.
fn for_value(element: &str) -> &str {
    let mut found = "";
    split_unquoted(element, b';', |pair| {
        if let Some((name, value)) = pair.split_once('=') {
            if found.is_empty() && name.trim().eq_ignore_ascii_case("for") {
                let value = value.trim();
                found = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value);
            }
        }
    });
    found
}

/// Calls `f` with each part of `s` between `sep`s that are not inside a
/// quoted string (RFC 9110 section 5.6.4, `\` escaping the next byte).
fn split_unquoted<'s>(s: &'s str, sep: u8, mut f: impl FnMut(&'s str)) {
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, &b) in s.as_bytes().iter().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            quoted = !quoted;
        } else if b == sep && !quoted {
            f(&s[start..i]);
            start = i + 1;
        }
    }
    f(&s[start..]);
}

/// A hop's address, without the port some proxies write after it
/// (`203.0.113.7:41234`, `[2001:db8::1]:41234`, `[2001:db8::1]`): one
/// client is one key, whatever port its connection came from.
pub(crate) fn hop_address(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse() {
        return Some(ip);
    }
    if let Ok(addr) = hop.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    hop.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

/// Each octet's decimal digits (left-aligned) and how many there are.
const OCTETS: [([u8; 3], u8); 256] = {
    let mut table = [([0u8; 3], 0u8); 256];
    let mut n = 0;
    while n < 256 {
        let v = n as u8;
        table[n] = if v >= 100 {
            ([b'0' + v / 100, b'0' + v / 10 % 10, b'0' + v % 10], 3)
        } else if v >= 10 {
            ([b'0' + v / 10, b'0' + v % 10, 0], 2)
        } else {
            ([b'0' + v, 0, 0], 1)
        };
        n += 1;
    }
    table
};

/// A client's key from its address: IPv4 (or IPv4-mapped IPv6) as is,
/// other IPv6 addresses grouped by their first `prefix` bits (a `prefix`
/// above 128 is 128: the whole address).
pub fn client_key(ip: IpAddr, prefix: u8) -> String {
    // The key is ASCII.
    String::from_utf8_lossy(inline_key(ip, prefix).as_bytes()).into_owned()
}

fn inline_key(ip: IpAddr, prefix: u8) -> Inline {
    // Grouped as ratomic's `ip_key` groups an `IpAddr` key, as text.
    let grouped = match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(_) => ratomic::ip_key(ip, ratomic::Ipv6Grouping::Bits(prefix.min(128))),
    };
    let mut out = Inline::new();
    match grouped {
        IpAddr::V4(v4) => {
            // `v4.to_string()` without the formatter (the key of every
            // request): each octet's digits from a table, at most 15 bytes.
            let mut at = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                let (digits, len) = OCTETS[usize::from(octet)];
                out.bytes[at..at + 4].copy_from_slice(&[b'.', digits[0], digits[1], digits[2]]);
                let skip = usize::from(i == 0);
                // The first octet has no dot: shift its digits left by one.
                if skip == 1 {
                    out.bytes.copy_within(1..4, 0);
                }
                at += usize::from(len) + 1 - skip;
            }
            out.len = at as u8;
        }
        IpAddr::V6(network) => {
            // At most 43 bytes: always fits.
            let _ = write!(out, "{network}/{}", prefix.min(128));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hop_s_port_is_not_part_of_the_client() {
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(hop_address("203.0.113.7"), ip("203.0.113.7"));
        assert_eq!(hop_address("203.0.113.7:41234"), ip("203.0.113.7"));
        assert_eq!(hop_address("[2001:db8::1]:41234"), ip("2001:db8::1"));
        assert_eq!(hop_address("[2001:db8::1]"), ip("2001:db8::1"));
        assert_eq!(hop_address("2001:db8::1"), ip("2001:db8::1"));
        assert_eq!(hop_address("unknown"), None);
        assert_eq!(hop_address("_hidden"), None);
    }

    #[test]
    fn a_prefix_above_128_is_the_whole_address() {
        let ip: IpAddr = "2001:db8::1".parse().unwrap();
        for prefix in [129, 200, 255] {
            assert_eq!(client_key(ip, prefix), "2001:db8::1/128");
        }
        let widest: IpAddr = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap();
        assert_eq!(client_key(widest, 128), "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128");
    }

    #[test]
    fn ipv6_keys_group_by_prefix_and_ipv4_stays_whole() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(client_key(ip("10.0.0.1"), 64), "10.0.0.1");
        for v4 in ["0.0.0.0", "255.255.255.255", "1.22.100.9", "100.10.1.0", "192.168.0.199"] {
            assert_eq!(client_key(ip(v4), 64), v4);
        }
        assert_eq!(client_key(ip("::ffff:10.0.0.1"), 64), "10.0.0.1");
        assert_eq!(client_key(ip("2001:db8:1:2:3:4:5:6"), 64), "2001:db8:1:2::/64");
        assert_eq!(client_key(ip("2001:db8:1:2::ffff"), 56), "2001:db8:1::/56");
        assert_eq!(client_key(ip("2001:db8::1"), 128), "2001:db8::1/128");
        assert_eq!(client_key(ip("2001:db8::1"), 0), "::/0");
    }

    #[test]
    fn forwarded_elements_split_outside_quotes_and_give_their_for() {
        let mut hops = SmallVec::new();
        forwarded_hops(
            r#"for=192.0.2.43;proto=https, For="[2001:db8:cafe::17]:4711", by=10.0.0.1, for="a,b;c\"", for=unknown"#,
            &mut hops,
        );
        assert_eq!(&hops[..], ["192.0.2.43", "[2001:db8:cafe::17]:4711", "", r#"a,b;c\""#, "unknown"]);
    }
}
