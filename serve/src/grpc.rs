//! Envoy's `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`:
//! the protocol's messages mapped to and from [`Engine::decide`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use ratomic::headers::{Headers, Policy};
use ratomic::Decision;
use tonic::{Request, Response, Status};

use crate::engine::{Descriptor, Engine, Outcome, Refused};
use crate::metrics::{Api, Metrics, Result as Counted};

/// The gRPC service.
#[derive(Debug)]
pub struct Rls {
    engine: Arc<Engine>,
    response_headers: bool,
    answered: Arc<AtomicU64>,
    metrics: Arc<Metrics>,
}

impl Rls {
    /// The service over `engine`; with `response_headers`, each response
    /// carries the IETF `RateLimit-Policy` and `RateLimit` fields (and
    /// `Retry-After` when over the limit) of its tightest descriptor in
    /// `response_headers_to_add`, which Envoy adds to the client's response.
    /// `answered` counts the responses returned.
    pub fn new(engine: Arc<Engine>, response_headers: bool, answered: Arc<AtomicU64>, metrics: Arc<Metrics>) -> Rls {
        Rls { engine, response_headers, answered, metrics }
    }
}

fn duration(d: Duration) -> PbDuration {
    PbDuration { seconds: d.as_secs().min(i64::MAX as u64) as i64, nanos: d.subsec_nanos() as i32 }
}

/// Maps a request to the engine's descriptors, or says what is wrong.
fn descriptors(req: &RateLimitRequest) -> Result<Vec<Descriptor<'_>>, Refused> {
    let request_hits = u64::from(req.hits_addend.max(1));
    req.descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if d.is_negative_hits {
                return Err(Refused::BadRequest(format!("descriptor {i}: is_negative_hits is not supported by ratomic serve")));
            }
            if d.limit.is_some() {
                return Err(Refused::BadRequest(format!(
                    "descriptor {i}: a limit override is not supported by ratomic serve; configure the limit in its YAML"
                )));
            }
            Ok(Descriptor {
                entries: d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())).collect(),
                hits: d.hits_addend.as_ref().map_or(request_hits, |h| h.value),
            })
        })
        .collect()
}

/// The response for the engine's outcomes.
pub fn response(outcomes: &[Outcome], response_headers: bool) -> RateLimitResponse {
    let mut overall = Code::Ok;
    let statuses = outcomes
        .iter()
        .map(|o| match o {
            Outcome::NoRule => DescriptorStatus { code: Code::Ok as i32, ..Default::default() },
            Outcome::Unlimited => {
                DescriptorStatus { code: Code::Ok as i32, limit_remaining: u32::MAX, ..Default::default() }
            }
            Outcome::Limited { requests_per_unit, unit, name, within, remaining, reset_after, .. } => {
                let code = if o.over_limit() {
                    overall = Code::OverLimit;
                    Code::OverLimit
                } else {
                    Code::Ok
                };
                DescriptorStatus {
                    code: code as i32,
                    current_limit: Some(RateLimit {
                        name: name.clone(),
                        requests_per_unit: *requests_per_unit,
                        unit: unit.proto(),
                    }),
                    limit_remaining: if *within { (*remaining).min(u64::from(u32::MAX)) as u32 } else { 0 },
                    duration_until_reset: Some(duration(*reset_after)),
                    quota: None,
                }
            }
        })
        .collect();
    let response_headers_to_add = if response_headers { header_fields(outcomes) } else { Vec::new() };
    RateLimitResponse { overall_code: overall as i32, statuses, response_headers_to_add, ..Default::default() }
}

/// The IETF fields of the tightest limited descriptor: the first one over
/// its limit, else the one with the fewest hits left.
fn header_fields(outcomes: &[Outcome]) -> Vec<HeaderValue> {
    let pick = outcomes.iter().find(|o| o.over_limit()).or_else(|| {
        outcomes.iter().filter(|o| matches!(o, Outcome::Limited { .. })).min_by_key(|o| {
            if let Outcome::Limited { remaining, .. } = o {
                *remaining
            } else {
                u64::MAX
            }
        })
    });
    let Some(Outcome::Limited {
        requests_per_unit, unit, name, path, within, remaining, reset_after, retry_after, ..
    }) = pick
    else {
        return Vec::new();
    };
    let label = if name.is_empty() { path } else { name };
    let Ok(policy) = Policy::new(label, u64::from(*requests_per_unit).max(1), unit.duration()) else {
        return Vec::new();
    };
    let decision = Decision {
        allowed: *within || !pick.is_some_and(Outcome::over_limit),
        remaining: if *within { *remaining } else { 0 },
        limit: u64::from(*requests_per_unit),
        retry_after: if pick.is_some_and(Outcome::over_limit) {
            (*retry_after).max(Duration::from_nanos(1))
        } else {
            Duration::ZERO
        },
        reset_after: *reset_after,
    };
    let fields = Headers::single(&policy, decision).fields(false);
    fields.into_iter().map(|(key, value)| HeaderValue { key: key.to_owned(), value, ..Default::default() }).collect()
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let start = Instant::now();
        let req = request.into_inner();
        let outcomes = match descriptors(&req) {
            Ok(ds) => self.engine.decide(&req.domain, &ds).await,
            Err(e) => Err(e),
        };
        match outcomes {
            Ok(outcomes) => {
                for o in &outcomes {
                    if let Outcome::Limited { path, within, shadow_mode, .. } = o {
                        let counted = match (within, shadow_mode) {
                            (true, _) => Counted::Allowed,
                            (false, false) => Counted::Denied,
                            (false, true) => Counted::ShadowDenied,
                        };
                        self.metrics.decision(&req.domain, path, counted);
                        if !within {
                            tracing::debug!(domain = %req.domain, rule = %path, shadow_mode, "over limit");
                        }
                    }
                }
                let resp = response(&outcomes, self.response_headers);
                self.metrics.latency(Api::Grpc, start.elapsed());
                self.answered.fetch_add(1, Ordering::Relaxed);
                Ok(Response::new(resp))
            }
            Err(Refused::BadRequest(msg)) => {
                tracing::info!(domain = %req.domain, error = %msg, "bad request");
                self.metrics.bad_request(Api::Grpc);
                Err(Status::invalid_argument(msg))
            }
            Err(Refused::Backend(e)) => {
                // The policy is to report backend failures: Envoy's
                // failure_mode_deny decides. The caller never sees the cause.
                tracing::error!(domain = %req.domain, error = %e, "backend error; no decision");
                self.metrics.backend_error();
                Err(Status::unavailable("the rate limit backend is unavailable"))
            }
        }
    }
}
