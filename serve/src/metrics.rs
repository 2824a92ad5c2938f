//! Counters and a latency histogram, written in Prometheus' text format.
//!
//! Labels are bounded by the configuration, never by what requests carry:
//! the domain and the rule's path (`domain.key_value.key`) for gRPC
//! decisions, `http` for the HTTP API.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency histogram's buckets, in seconds.
const BUCKETS: [f64; 12] =
    [0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 1.0];

/// What a decision was, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Result {
    /// Within the limit.
    Allowed = 0,
    /// Over the limit.
    Denied,
    /// Over the limit in shadow mode: reported as OK.
    ShadowDenied,
}

impl Result {
    fn label(self) -> &'static str {
        match self {
            Result::Allowed => "allowed",
            Result::Denied => "denied",
            Result::ShadowDenied => "shadow_denied",
        }
    }
}

/// Which face a latency belongs to.
#[derive(Clone, Copy, Debug)]
pub enum Api {
    /// Envoy's RLS over gRPC.
    Grpc = 0,
    /// The HTTP/JSON API.
    Http = 1,
}

/// Which listener a connection came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    /// The gRPC listener (`--grpc-listen`).
    Grpc = 0,
    /// The HTTP listener (`--http-listen`).
    Http = 1,
}

impl Listener {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Listener::Grpc => "grpc",
            Listener::Http => "http",
        }
    }
}

#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

/// The service's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    // domain → rule → [allowed, denied, shadow_denied]
    decisions: Mutex<HashMap<String, HashMap<String, [u64; 3]>>>,
    backend_errors: AtomicU64,
    lease_decisions: AtomicU64,
    bad_requests: [AtomicU64; 2],
    latency: [Histogram; 2],
    // Per listener: open now, the bound, refused past the bound.
    connections: [AtomicU64; 2],
    max_connections: [AtomicU64; 2],
    refused: [AtomicU64; 2],
}

impl Metrics {
    /// Counts `n` decisions of `result` for `domain`'s rule `descriptor`.
    pub fn decision(&self, domain: &str, descriptor: &str, result: Result) {
        let mut map = self.decisions.lock().unwrap_or_else(|e| e.into_inner());
        // Look up by reference: allocate only for a new label set.
        if !map.contains_key(domain) {
            map.insert(domain.to_owned(), HashMap::new());
        }
        let rules = map.get_mut(domain).expect("inserted above");
        if !rules.contains_key(descriptor) {
            rules.insert(descriptor.to_owned(), [0; 3]);
        }
        rules.get_mut(descriptor).expect("inserted above")[result as usize] += 1;
    }

    /// Counts an error of the state's backend.
    pub fn backend_error(&self) {
        self.backend_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a descriptor decided from a lease (tokens leased from Redis or PostgreSQL, granted here).
    pub fn lease_decision(&self) {
        self.lease_decisions.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a refused request.
    pub fn bad_request(&self, api: Api) {
        self.bad_requests[api as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Records `listener`'s bound on open connections.
    pub fn connection_bound(&self, listener: Listener, max: usize) {
        self.max_connections[listener as usize].store(max as u64, Ordering::Relaxed);
    }

    /// Counts a connection accepted on `listener`.
    pub fn connection_opened(&self, listener: Listener) {
        self.connections[listener as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection of `listener` closed.
    pub fn connection_closed(&self, listener: Listener) {
        self.connections[listener as usize].fetch_sub(1, Ordering::Relaxed);
    }

    /// Counts a connection closed at once: `listener` had its most open.
    pub fn connection_refused(&self, listener: Listener) {
        self.refused[listener as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Records one request's latency.
    pub fn latency(&self, api: Api, d: Duration) {
        let h = &self.latency[api as usize];
        let secs = d.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                h.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        h.count.fetch_add(1, Ordering::Relaxed);
        h.sum_nanos.fetch_add(d.as_nanos().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
    }

    /// The metrics in Prometheus' text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP ratomic_serve_decisions_total Descriptor decisions by domain, rule and result.\n");
        out.push_str("# TYPE ratomic_serve_decisions_total counter\n");
        let sorted: BTreeMap<(String, String, Result), u64> = {
            let map = self.decisions.lock().unwrap_or_else(|e| e.into_inner());
            map.iter()
                .flat_map(|(d, rules)| {
                    rules.iter().flat_map(move |(k, n)| {
                        [Result::Allowed, Result::Denied, Result::ShadowDenied]
                            .into_iter()
                            .filter(move |r| n[*r as usize] > 0)
                            .map(move |r| ((d.clone(), k.clone(), r), n[r as usize]))
                    })
                })
                .collect()
        };
        for ((domain, descriptor, result), n) in &sorted {
            let _ = writeln!(
                out,
                "ratomic_serve_decisions_total{{domain=\"{}\",descriptor=\"{}\",result=\"{}\"}} {n}",
                escape(domain),
                escape(descriptor),
                result.label()
            );
        }
        out.push_str("# HELP ratomic_serve_backend_errors_total Errors of the state's backend.\n");
        out.push_str("# TYPE ratomic_serve_backend_errors_total counter\n");
        let _ = writeln!(out, "ratomic_serve_backend_errors_total {}", self.backend_errors.load(Ordering::Relaxed));
        out.push_str(
            "# HELP ratomic_serve_lease_decisions_total Descriptor decisions answered from tokens leased from Redis or PostgreSQL.\n",
        );
        out.push_str("# TYPE ratomic_serve_lease_decisions_total counter\n");
        let _ = writeln!(out, "ratomic_serve_lease_decisions_total {}", self.lease_decisions.load(Ordering::Relaxed));
        out.push_str("# HELP ratomic_serve_bad_requests_total Requests refused as invalid.\n");
        out.push_str("# TYPE ratomic_serve_bad_requests_total counter\n");
        for (api, name) in [(Api::Grpc, "grpc"), (Api::Http, "http")] {
            let n = self.bad_requests[api as usize].load(Ordering::Relaxed);
            let _ = writeln!(out, "ratomic_serve_bad_requests_total{{api=\"{name}\"}} {n}");
        }
        let listeners = [Listener::Grpc, Listener::Http];
        out.push_str("# HELP ratomic_serve_connections Connections open now, by listener.\n");
        out.push_str("# TYPE ratomic_serve_connections gauge\n");
        for l in listeners {
            let n = self.connections[l as usize].load(Ordering::Relaxed);
            let _ = writeln!(out, "ratomic_serve_connections{{listener=\"{}\"}} {n}", l.label());
        }
        out.push_str(
            "# HELP ratomic_serve_max_connections The most connections a listener holds open (--max-connections).\n",
        );
        out.push_str("# TYPE ratomic_serve_max_connections gauge\n");
        for l in listeners {
            let n = self.max_connections[l as usize].load(Ordering::Relaxed);
            let _ = writeln!(out, "ratomic_serve_max_connections{{listener=\"{}\"}} {n}", l.label());
        }
        out.push_str(
            "# HELP ratomic_serve_connections_refused_total Connections closed at once: the listener had its most open.\n",
        );
        out.push_str("# TYPE ratomic_serve_connections_refused_total counter\n");
        for l in listeners {
            let n = self.refused[l as usize].load(Ordering::Relaxed);
            let _ = writeln!(out, "ratomic_serve_connections_refused_total{{listener=\"{}\"}} {n}", l.label());
        }
        out.push_str("# HELP ratomic_serve_request_duration_seconds Time to decide a request.\n");
        out.push_str("# TYPE ratomic_serve_request_duration_seconds histogram\n");
        for (api, name) in [(Api::Grpc, "grpc"), (Api::Http, "http")] {
            let h = &self.latency[api as usize];
            for (i, b) in BUCKETS.iter().enumerate() {
                let n = h.buckets[i].load(Ordering::Relaxed);
                let _ = writeln!(out, "ratomic_serve_request_duration_seconds_bucket{{api=\"{name}\",le=\"{b}\"}} {n}");
            }
            let count = h.count.load(Ordering::Relaxed);
            let _ =
                writeln!(out, "ratomic_serve_request_duration_seconds_bucket{{api=\"{name}\",le=\"+Inf\"}} {count}");
            let sum = h.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(out, "ratomic_serve_request_duration_seconds_sum{{api=\"{name}\"}} {sum}");
            let _ = writeln!(out, "ratomic_serve_request_duration_seconds_count{{api=\"{name}\"}} {count}");
        }
        out
    }
}

/// A label value escaped as the text format requires.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_histogram_render_as_prometheus_text() {
        let m = Metrics::default();
        m.decision("d", "d.user", Result::Allowed);
        m.decision("d", "d.user", Result::Allowed);
        m.decision("d", "d.\"q\"", Result::Denied);
        m.latency(Api::Grpc, Duration::from_micros(30));
        let text = m.render();
        assert!(
            text.contains("ratomic_serve_decisions_total{domain=\"d\",descriptor=\"d.user\",result=\"allowed\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("descriptor=\"d.\\\"q\\\"\",result=\"denied\"} 1\n"), "{text}");
        assert!(
            text.contains("ratomic_serve_request_duration_seconds_bucket{api=\"grpc\",le=\"0.000025\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("ratomic_serve_request_duration_seconds_bucket{api=\"grpc\",le=\"0.00005\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("ratomic_serve_request_duration_seconds_count{api=\"grpc\"} 1\n"), "{text}");
    }
}
