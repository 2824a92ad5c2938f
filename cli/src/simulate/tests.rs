use super::render::bar;
use super::*;

fn config(rates: &[&str], algos: &[Algo]) -> SimConfig {
    SimConfig {
        specs: rates.iter().map(|r| r.parse().unwrap()).collect(),
        algos: algos.to_vec(),
        bursts: vec![],
        rps: 50.0,
        seconds: 10.0,
        keys: 1,
        cost: 1,
        arrival: None,
        seed: 42,
        realtime: false,
        redis: None,
        postgres: None,
    }
}

#[test]
fn default_run_grants_exactly_what_gcra_allows() {
    let r = run(config(&["10/s"], &[Algo::TokenBucket])).unwrap();
    let lane = &r.lanes[0];
    // Requests every 20 ms. The full bucket grants the first 10 (0–180 ms);
    // tokens refill from t = 0, one every 100 ms, so the two that came back
    // meanwhile pass at 200 and 220 ms, then one at 300, 400, …, 9900 ms.
    // That is GCRA's bound B + floor((d − 1)/T) = 10 + 99, met exactly.
    assert_eq!(lane.allowed(), 10 + 2 + 97);
    assert_eq!(lane.allowed() + lane.denied(), 500);
    assert_eq!(lane.allowed_bins[..3], [19, 10, 10]);
    assert_eq!(lane.max_in_span(1_000_000_000).count, 19);
    assert_eq!(lane.max_in_span(100_000_000).count, 5);
}

#[test]
fn fixed_window_doubles_at_the_boundary_and_the_others_do_not() {
    let r = run(config(&["10/s"], &Algo::ALL)).unwrap();
    assert_eq!(r.workload.arrival, Arrival::Bursty);
    let by = |a| r.lanes.iter().find(|l| l.algo == a).unwrap().max_in_span(1_000_000_000).count;
    assert_eq!(by(Algo::FixedWindow), 20);
    assert!(by(Algo::TokenBucket) <= 11, "{}", by(Algo::TokenBucket));
    assert!(by(Algo::SlidingWindow) <= 11, "{}", by(Algo::SlidingWindow));
}

#[test]
fn multi_limit_counts_denials_per_limit() {
    let r = run(SimConfig { seconds: 20.0, ..config(&["10/s", "fw:100/m"], &[Algo::TokenBucket]) }).unwrap();
    let lane = &r.lanes[0];
    assert_eq!(lane.allowed(), 100, "the minute's 100 run out within 20 s");
    let by = lane.denied_by();
    assert!(by[0] > 0 && by[1] > 0, "{by:?}");
}

#[test]
fn cost_above_the_limit_is_refused_up_front() {
    let e = run(SimConfig { cost: 11, ..config(&["10/s"], &[Algo::TokenBucket]) }).unwrap_err();
    assert!(e.contains("cost 11 exceeds the limit 10"), "{e}");
}

#[test]
fn too_many_requests_are_refused() {
    let e = run(SimConfig { rps: 1e9, ..config(&["10/s"], &[Algo::TokenBucket]) }).unwrap_err();
    assert!(e.contains("at most 10,000,000"), "{e}");
    // A burst concentrates two windows of traffic: counted up front too.
    let bursty = SimConfig {
        rps: 100.0,
        seconds: 90_000.0,
        arrival: Some(Arrival::Bursty),
        ..config(&["1/d"], &[Algo::TokenBucket])
    };
    assert!(run(bursty).unwrap_err().contains("at most 10,000,000"));
}

#[test]
fn runs_longer_than_a_year_are_refused() {
    let e = run(SimConfig { seconds: 4e7, rps: 1e-3, ..config(&["10/s"], &[Algo::TokenBucket]) }).unwrap_err();
    assert!(e.contains("at most 31536000"), "{e}");
}

#[test]
fn bins_are_seconds_up_to_a_minute() {
    assert_eq!(bin_width(10_000_000_000), 1_000_000_000);
    assert_eq!(bin_width(500_000_000), 100_000_000);
    assert_eq!(bin_width(600_000_000_000), 10_000_000_000);
    assert!(bin_width(u64::MAX / 2) > 0);
}

#[test]
fn bars_scale_and_never_hide_a_nonzero_count() {
    assert_eq!(bar(0, 50, 40, '#'), "");
    assert_eq!(bar(50, 50, 40, '#').len(), 40);
    assert_eq!(bar(1, 1000, 40, '#').len(), 1);
}
