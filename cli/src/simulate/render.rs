//! What a simulation prints: the per-bin table and the summary.

use crate::format;
use crate::limits::{Algo, Limit};
use crate::stats::{self, Burst};
use crate::workload::Arrival;

use super::{Lane, SimReport};

impl SimReport {
    /// Requests offered.
    pub fn offered(&self) -> u64 {
        self.offered_bins.iter().sum()
    }

    /// Length of the run in seconds.
    pub fn seconds(&self) -> f64 {
        self.workload.duration_ns as f64 / 1e9
    }

    /// The spans the "largest burst" figures are measured over: one emission
    /// interval of the tightest limit, one second, and each limit's period.
    pub fn burst_spans(&self) -> Vec<u64> {
        let limits = &self.lanes[0].limits;
        let mut spans: Vec<u64> = limits.iter().map(|l| l.emission_interval_ns()).min().into_iter().collect();
        spans.push(1_000_000_000);
        spans.extend(limits.iter().map(|l| l.rate.period_nanos()));
        spans.retain(|&s| s <= self.workload.duration_ns.max(1_000_000_000));
        spans.sort_unstable();
        spans.dedup();
        spans
    }

    /// The report as text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_header(&mut out);
        out.push('\n');
        if self.lanes.len() == 1 {
            self.render_bins_single(&mut out);
            out.push('\n');
            self.render_summary_single(&mut out);
        } else {
            self.render_bins_compare(&mut out);
            out.push('\n');
            if self.render_zoom(&mut out) {
                out.push('\n');
            }
            self.render_summary_compare(&mut out);
        }
        out
    }

    fn render_header(&self, out: &mut String) {
        let c = &self.config;
        let w = &self.workload;
        if self.lanes.len() == 1 {
            out.push_str("ratomic simulate\n");
            let limits = &self.lanes[0].limits;
            for (i, l) in limits.iter().enumerate() {
                out.push_str(&format!("  {:<9} {}\n", if i == 0 { "limit" } else { "" }, l.describe()));
            }
            if limits.len() > 1 {
                out.push_str(&format!("  {:<9} all or nothing: a request passes only if every limit allows it\n", ""));
            }
        } else {
            out.push_str("ratomic simulate: the same traffic through each algorithm, side by side\n");
            for lane in &self.lanes {
                for (i, l) in lane.limits.iter().enumerate() {
                    out.push_str(&format!("  {:<15} {}\n", if i == 0 { lane.label() } else { "" }, l.describe()));
                }
            }
        }
        let pad = if self.lanes.len() == 1 { 9 } else { 15 };
        let arrival = match w.arrival {
            Arrival::Uniform => "uniform".to_string(),
            Arrival::Poisson => format!("poisson (seed {})", w.seed),
            Arrival::Bursty => format!(
                "bursty: {} requests straddling every other {} window boundary, quiet between",
                format::count((c.rps * 2.0 * w.boundary_ns as f64 / 1e9).round().max(2.0) as u64),
                format::nanos(w.boundary_ns)
            ),
        };
        let defaulted =
            if self.arrival_defaulted && self.lanes.len() > 1 { " (the default when comparing)" } else { "" };
        out.push_str(&format!(
            "  {:<pad$} {} requests/s for {}, {arrival}{defaulted}\n",
            "traffic",
            fmt_num(c.rps),
            format::nanos(w.duration_ns)
        ));
        let keys = if w.keys == 1 {
            "1 key".to_string()
        } else {
            format!("{} keys (each limited on its own)", format::count(w.keys.into()))
        };
        out.push_str(&format!("  {:<pad$} {keys}, cost {} per request\n", "", c.cost));
        let clock = if c.realtime {
            format!("real (monotonic clock, paced in real time: took {})", format::duration(self.wall))
        } else if let Some(url) = &c.redis {
            format!(
                "simulated (manual clock, decided on Redis at {url}: took {} of real time)",
                format::duration(self.wall)
            )
        } else if c.postgres.is_some() {
            format!(
                "simulated (manual clock, decided on PostgreSQL: took {} of real time)",
                format::duration(self.wall)
            )
        } else {
            format!("simulated (manual clock: took {} of real time)", format::duration(self.wall))
        };
        out.push_str(&format!("  {:<pad$} {clock}\n", "clock"));
    }

    fn bin_label(&self, i: usize) -> String {
        let start = i as u64 * self.bin_ns;
        if self.bin_ns.is_multiple_of(1_000_000_000) {
            format!("{}s", start / 1_000_000_000)
        } else {
            format!("{:.1}s", start as f64 / 1e9)
        }
    }

    fn render_bins_single(&self, out: &mut String) {
        const WIDTH: u64 = 40;
        let lane = &self.lanes[0];
        let multi = lane.limits.len() > 1;
        let max = self.offered_bins.iter().copied().max().unwrap_or(1).max(1);
        let label_w = (0..self.offered_bins.len()).map(|i| self.bin_label(i).len()).max().unwrap_or(2).max(4);
        let mut head = format!("  {:>label_w$}  offered  allowed  denied", "from");
        let by_w: Vec<usize> = lane.limits.iter().map(|l| l.name.len().max(4) + 3).collect();
        if multi {
            for (l, w) in lane.limits.iter().zip(&by_w) {
                head.push_str(&format!("  {:>w$}", format!("by {}", l.name)));
            }
        }
        head.push_str(&format!("   {} allowed {} denied", '█', '░'));
        out.push_str(&head);
        out.push('\n');
        for i in 0..self.offered_bins.len() {
            let (a, d) = (lane.allowed_bins[i], lane.denied_bins[i]);
            let mut row = format!("  {:>label_w$}  {:>7}  {:>7}  {:>6}", self.bin_label(i), self.offered_bins[i], a, d);
            if multi {
                for (n, w) in lane.denied_by_bins[i].iter().zip(&by_w) {
                    row.push_str(&format!("  {n:>w$}"));
                }
            }
            row.push_str("   ");
            row.push_str(&bar(a, max, WIDTH, '█'));
            row.push_str(&bar(d, max, WIDTH, '░'));
            out.push_str(row.trim_end());
            out.push('\n');
        }
    }

    fn render_summary_single(&self, out: &mut String) {
        let lane = &self.lanes[0];
        let c = &self.config;
        let secs = self.seconds();
        let offered = self.offered();
        let (allowed, denied) = (lane.allowed(), lane.denied());
        let keys = u64::from(self.workload.keys);
        let line = |out: &mut String, label: &str, figure: String, rest: String| {
            out.push_str(format!("  {label:<14} {figure:>7} {rest}").trim_end());
            out.push('\n');
        };
        out.push_str("summary\n");
        line(out, "offered", format::count(offered), format!("requests  {}", format::per_sec(offered as f64 / secs)));
        let per_key = if keys > 1 { " per key" } else { "" };
        let granted = format::per_sec((allowed * c.cost) as f64 / secs / keys as f64);
        let tokens = if c.cost > 1 { format!(" ({} tokens)", format::count(allowed * c.cost)) } else { String::new() };
        line(
            out,
            "allowed",
            format::count(allowed),
            format!("requests{tokens}  {granted}{per_key} vs {}", configured(&lane.limits)),
        );
        if let [l] = &lane.limits[..] {
            if l.algo == Algo::TokenBucket {
                // GCRA grants at most B + floor((d − 1)/T) tokens in [0, d): the
                // burst at once, then one per emission interval, counted from t = 0.
                let bound = l.capacity() + self.workload.duration_ns.saturating_sub(1) / l.emission_interval_ns();
                line(
                    out,
                    "",
                    String::new(),
                    format!(
                        "          = the burst of {} up front + one token every {}: at most {}{per_key} in {}",
                        l.capacity(),
                        format::nanos(l.emission_interval_ns()),
                        format::count(bound),
                        format::nanos(self.workload.duration_ns)
                    ),
                );
            }
        }
        let pct = if offered > 0 { denied as f64 * 100.0 / offered as f64 } else { 0.0 };
        line(out, "denied", format::count(denied), format!("requests  {pct:.0}% of offered"));
        if lane.limits.len() > 1 {
            let by: Vec<String> = lane
                .limits
                .iter()
                .zip(lane.denied_by())
                .map(|(l, n)| format!("{} {}", l.name, format::count(n)))
                .collect();
            line(
                out,
                "denied by",
                String::new(),
                format!("{}  (one denial can count for several limits)", by.join(" · ")),
            );
        }
        line(out, "retry_after", String::new(), retry_line(&lane.retry_ns));
        for (i, &span) in self.burst_spans().iter().enumerate() {
            let b = lane.max_in_span(span);
            let label = if i == 0 { "largest burst" } else { "" };
            line(
                out,
                label,
                format::count(b.count),
                format!("within {:<6} {}", format::nanos(span), self.span_note(lane, span, b)),
            );
        }
    }

    /// What a "largest burst" figure means for a single limit.
    fn span_note(&self, lane: &Lane, span: u64, b: Burst) -> String {
        let [l] = &lane.limits[..] else {
            return String::new();
        };
        let mut notes = Vec::new();
        if span == l.emission_interval_ns() {
            notes.push("one emission interval".to_string());
        }
        if span == l.rate.period_nanos() {
            notes.push(format!("limit {} per {}", l.rate.count(), format::nanos(span)));
        }
        if l.algo == Algo::TokenBucket && b.count > 0 {
            let refills = (span - 1) / l.emission_interval_ns();
            notes.push(if refills == 0 {
                format!("a token bucket's bound: the burst, {}", l.capacity())
            } else {
                format!(
                    "a token bucket's bound: burst {} + {refills} refill{} = {}",
                    l.capacity(),
                    if refills == 1 { "" } else { "s" },
                    l.capacity() + refills
                )
            });
        }
        if notes.is_empty() {
            String::new()
        } else {
            format!("({})", notes.join("; "))
        }
    }

    fn render_bins_compare(&self, out: &mut String) {
        const WIDTH: u64 = 20;
        let max = self.lanes.iter().flat_map(|l| l.allowed_bins.iter().copied()).max().unwrap_or(1).max(1);
        let label_w = (0..self.offered_bins.len()).map(|i| self.bin_label(i).len()).max().unwrap_or(2).max(4);
        let col = WIDTH as usize + 7;
        let mut head = format!("  {:>label_w$}  offered", "from");
        for lane in &self.lanes {
            head.push_str(&format!("  {:<col$}", format!("{} allowed", lane.label())));
        }
        out.push_str(head.trim_end());
        out.push('\n');
        for i in 0..self.offered_bins.len() {
            let mut row = format!("  {:>label_w$}  {:>7}", self.bin_label(i), self.offered_bins[i]);
            for lane in &self.lanes {
                let a = lane.allowed_bins[i];
                row.push_str(&format!("  {a:>5} {:<w$}", bar(a, max, WIDTH, '█'), w = WIDTH as usize));
            }
            out.push_str(row.trim_end());
            out.push('\n');
        }
    }

    /// The fixed window's largest burst, if it went over the limit: the
    /// window length, the limit, the burst, and the boundary it straddles.
    fn fixed_window_overshoot(&self) -> Option<(u64, u64, Burst, u64)> {
        let fixed = self.lanes.iter().find(|l| l.algo == Algo::FixedWindow)?;
        let limit =
            fixed.limits.iter().filter(|l| l.algo == Algo::FixedWindow).min_by_key(|l| l.rate.period_nanos())?;
        let window = limit.rate.period_nanos();
        let b = fixed.max_in_span(window);
        (b.count > limit.rate.count()).then(|| (window, limit.rate.count(), b, (b.last_ns / window) * window))
    }

    /// A close-up of the fixed window's double burst: grants around the
    /// boundary in fiftieths of a window. Returns whether it printed anything.
    fn render_zoom(&self, out: &mut String) -> bool {
        const WIDTH: u64 = 20;
        let Some((window, _, _, boundary)) = self.fixed_window_overshoot() else { return false };
        let step = (window / 50).max(1);
        let start = boundary.saturating_sub(5 * step);
        let rows: Vec<(u64, Vec<u64>)> = (0..10)
            .map(|i| {
                let lo = start + i * step;
                let counts = self
                    .lanes
                    .iter()
                    .map(|l| {
                        l.grants.iter().map(|g| g.iter().filter(|&&t| t >= lo && t < lo + step).count() as u64).sum()
                    })
                    .collect();
                (lo, counts)
            })
            .collect();
        let max = rows.iter().flat_map(|(_, c)| c.iter().copied()).max().unwrap_or(1).max(1);
        out.push_str(&format!(
            "close-up: requests allowed around the window boundary at {}, {} per row\n",
            format::instant(boundary),
            format::nanos(step)
        ));
        let col = WIDTH as usize + 7;
        let mut head = format!("  {:>8}", "from");
        for lane in &self.lanes {
            head.push_str(&format!("  {:<col$}", lane.label()));
        }
        out.push_str(head.trim_end());
        out.push('\n');
        for (lo, counts) in rows {
            if lo == boundary {
                out.push_str(&format!(
                    "  {:>8}  {}\n",
                    "",
                    "╌".repeat((col + 2) * self.lanes.len() - 2) + " window boundary"
                ));
            }
            let mut row = format!("  {:>8}", format::instant(lo));
            for n in counts {
                row.push_str(&format!("  {n:>5} {:<w$}", bar(n, max, WIDTH, '█'), w = WIDTH as usize));
            }
            out.push_str(row.trim_end());
            out.push('\n');
        }
        true
    }

    fn render_summary_compare(&self, out: &mut String) {
        let secs = self.seconds();
        let keys = u64::from(self.workload.keys);
        let cost = self.config.cost;
        let col = self.lanes.iter().map(|l| l.label().len()).max().unwrap_or(12) + 2;
        let spans = self.burst_spans();
        let first = &self.lanes[0].limits;
        out.push_str(&format!(
            "summary: {} requests offered ({}), {}\n",
            format::count(self.offered()),
            format::per_sec(self.offered() as f64 / secs),
            configured(first)
        ));
        let mut head = format!("  {:<22}", "");
        for lane in &self.lanes {
            head.push_str(&format!("{:>col$}", lane.label()));
        }
        out.push_str(&head);
        out.push('\n');
        let row = |out: &mut String, name: &str, cells: Vec<String>, note: &str| {
            let mut r = format!("  {name:<22}");
            for c in cells {
                r.push_str(&format!("{c:>col$}"));
            }
            if !note.is_empty() {
                r.push_str("   ");
                r.push_str(note);
            }
            out.push_str(&r);
            out.push('\n');
        };
        row(out, "allowed", self.lanes.iter().map(|l| format::count(l.allowed())).collect(), "");
        let per_key = if keys > 1 { " per key" } else { "" };
        row(
            out,
            &format!("granted rate{per_key}"),
            self.lanes.iter().map(|l| format::per_sec((l.allowed() * cost) as f64 / secs / keys as f64)).collect(),
            "",
        );
        row(out, "denied", self.lanes.iter().map(|l| format::count(l.denied())).collect(), "");
        for &span in &spans {
            let note = first
                .iter()
                .find(|l| l.rate.period_nanos() == span)
                .map(|l| format!("limit {} per {}", l.rate.count(), format::nanos(span)))
                .unwrap_or_default();
            row(
                out,
                &format!("max within any {}", format::nanos(span)),
                self.lanes.iter().map(|l| format::count(l.max_in_span(span).count)).collect(),
                &note,
            );
        }
        for (name, p) in [("retry_after p50", 50.0), ("retry_after p99", 99.0)] {
            row(
                out,
                name,
                self.lanes
                    .iter()
                    .map(|l| stats::percentile(&l.retry_ns, p).map_or("-".into(), format::nanos))
                    .collect(),
                "",
            );
        }
        out.push('\n');
        self.render_boundary_verdict(out);
    }

    /// Says in words whether the fixed window's double burst showed up.
    fn render_boundary_verdict(&self, out: &mut String) {
        let Some(fixed) = self.lanes.iter().find(|l| l.algo == Algo::FixedWindow) else { return };
        let Some(limit) =
            fixed.limits.iter().filter(|l| l.algo == Algo::FixedWindow).min_by_key(|l| l.rate.period_nanos())
        else {
            return;
        };
        let window = limit.rate.period_nanos();
        let others: Vec<String> = self
            .lanes
            .iter()
            .filter(|l| l.algo != Algo::FixedWindow)
            .map(|l| format!("{} at most {}", l.label(), l.max_in_span(window).count))
            .collect();
        let others = if others.is_empty() {
            String::new()
        } else {
            format!("\n  In any {} span: {}.", format::nanos(window), others.join(", "))
        };
        match self.fixed_window_overshoot() {
            Some((window, count, b, boundary)) => out.push_str(&format!(
                "  fixed-window granted {} requests to one key between {} and {} ({}), across the\n  \
                 window boundary at {}: {:.1}× its limit of {} per {}.{others}\n",
                b.count,
                format::instant(b.first_ns),
                format::instant(b.last_ns),
                format::nanos(b.last_ns - b.first_ns),
                format::instant(boundary),
                b.count as f64 / count as f64,
                count,
                format::nanos(window),
            )),
            None => out.push_str(&format!(
                "  fixed-window never exceeded {} per {} here: this traffic did not crowd a window boundary\n  \
                 (try --arrival bursty).{others}\n",
                limit.rate.count(),
                format::nanos(window)
            )),
        }
    }
}

/// "configured 10/s", or for several limits each and the tightest.
fn configured(limits: &[Limit]) -> String {
    match limits {
        [l] if l.rate.period_nanos() == 1_000_000_000 => format!("{} configured", l.rate),
        [l] => format!("{} configured (= {})", l.rate, format::per_sec(l.rate.per_sec())),
        _ => {
            let tight = limits.iter().min_by(|a, b| a.rate.per_sec().total_cmp(&b.rate.per_sec())).expect("limits");
            let sustained = if tight.rate.period_nanos() == 1_000_000_000 {
                tight.rate.to_string()
            } else {
                format!("{} = {}", tight.rate, format::per_sec(tight.rate.per_sec()))
            };
            format!(
                "{} configured (sustained at most {sustained}, by {})",
                limits.iter().map(|l| l.name.as_str()).collect::<Vec<_>>().join(" + "),
                tight.name
            )
        }
    }
}

fn retry_line(sorted: &[u64]) -> String {
    match (stats::percentile(sorted, 50.0), stats::percentile(sorted, 99.0)) {
        (Some(p50), Some(p99)) => format!(
            "p50 {} · p99 {} · max {}  (how long a denied request had to wait; {} denials)",
            format::nanos(p50),
            format::nanos(p99),
            format::nanos(*sorted.last().expect("non-empty")),
            format::count(sorted.len() as u64)
        ),
        _ => "no denials".into(),
    }
}

/// A bar of `n` out of `max`, `width` cells at most; anything above zero shows at least one cell.
pub(super) fn bar(n: u64, max: u64, width: u64, cell: char) -> String {
    let cells = if n == 0 { 0 } else { ((n * width + max / 2) / max).max(1) };
    cell.to_string().repeat(cells as usize)
}

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}
