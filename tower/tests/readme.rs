//! The README's migration from tower_governor, as written: the diff's two
//! sides are the two apps below (checked line by line), and both, served
//! on 127.0.0.1, answer the same requests alike.

mod support;

use axum::routing::get;
use axum::Router;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

use support::{get as fetch, serve};

const README: &str = include_str!("../../README.md");
const THIS: &str = include_str!("readme.rs");

// README: before
#[rustfmt::skip]
fn governor_app() -> Router {
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(GovernorLayer::new(GovernorConfigBuilder::default().per_second(60).burst_size(5).finish().unwrap()));
    app
}

// README: after
#[rustfmt::skip]
fn ratomic_app() -> Result<Router, ratomic::Error> {
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(ratomic_tower::RateLimitLayer::new(ratomic::TokenBucket::builder("5/5min").build()?));
    Ok(app)
}

/// The diff's lines (indentation aside) on each side: context and `-`
/// lines before, context and `+` lines after.
fn diff() -> (Vec<&'static str>, Vec<&'static str>) {
    let marker = "<!-- tower-governor-migration -->\n```diff\n";
    let start = README.find(marker).expect("the README's tower_governor migration diff") + marker.len();
    let end = start + README[start..].find("```").expect("the diff's end");
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for line in README[start..end].lines() {
        let (tag, text) = line.split_at(1);
        match tag {
            " " => {
                before.push(text.trim());
                after.push(text.trim());
            }
            "-" => before.push(text.trim()),
            "+" => after.push(text.trim()),
            other => panic!("a diff line starts with {other:?}: {line}"),
        }
    }
    (before, after)
}

/// The body of the function after `// README: {side}`, up to the line that
/// returns the app.
fn body(side: &str) -> Vec<&'static str> {
    let from = THIS.find(&format!("// README: {side}\n")).unwrap();
    let lines = THIS[from..].lines().skip_while(|l| !l.starts_with("fn ")).skip(1);
    lines
        .take_while(|l| !l.trim_start().starts_with("app") && !l.trim_start().starts_with("Ok(app)"))
        .map(str::trim)
        .collect()
}

#[test]
fn the_readme_diff_is_these_two_apps() {
    let (before, after) = diff();
    assert_eq!(before, body("before"));
    assert_eq!(after, body("after"));
    assert_eq!(before.iter().zip(&after).filter(|(a, b)| a != b).count(), 1, "a one-line change");
}

#[tokio::test]
async fn both_apps_answer_alike() {
    let mut answers = Vec::new();
    for app in [governor_app(), ratomic_app().unwrap()] {
        let addr = serve(app).await;
        let mut statuses = Vec::new();
        for _ in 0..7 {
            statuses.push(fetch(addr).await.status);
        }
        answers.push(statuses);
    }
    assert_eq!(answers[0], [200, 200, 200, 200, 200, 429, 429]);
    assert_eq!(answers[1], answers[0]);
}
