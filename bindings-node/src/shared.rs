//! Process-wide limiters by name, shared by every worker thread.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{JsFailure, Res};
use crate::rule::{describe, RuleSpec, StoreOptions};

/// A shared limiter and the configuration it was made from.
struct Entry {
    rules: Vec<RuleSpec>,
    options: StoreOptions,
    limiter: Arc<dyn Any + Send + Sync>,
}

fn registry() -> &'static Mutex<HashMap<String, Entry>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Entry>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// The limiter called `name`, made by `make` on first use. Asking again with
/// another configuration or another kind of limiter (`T`) is an `Error`
/// with code `ERR_RATOMIC_SHARED_CONFLICT`.
pub fn get_or_make<T: Send + Sync + 'static>(
    name: &str,
    rules: Vec<RuleSpec>,
    options: StoreOptions,
    make: impl FnOnce() -> Res<T>,
) -> Res<Arc<T>> {
    let mut map = registry().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(e) = map.get(name) {
        let same = e.rules == rules && e.options == options;
        let (existing, asked) = (describe(&e.rules, &e.options), describe(&rules, &options));
        return match e.limiter.clone().downcast::<T>() {
            Ok(limiter) if same => Ok(limiter),
            Ok(_) => Err(JsFailure::error(
                "ERR_RATOMIC_SHARED_CONFLICT",
                format!(
                    "a shared limiter named {name:?} already exists with a different configuration \
                     ({existing}; asked for {asked}): use the same arguments or another name"
                ),
            )),
            // Same rule, another kind (a TokenBucket and a DirectTokenBucket, say).
            Err(_) => Err(JsFailure::error(
                "ERR_RATOMIC_SHARED_CONFLICT",
                format!(
                    "a shared limiter named {name:?} already exists as another kind of limiter \
                     ({existing}; asked for {asked}): use another name"
                ),
            )),
        };
    }
    let limiter = Arc::new(make()?);
    map.insert(name.to_owned(), Entry { rules, options, limiter: limiter.clone() });
    Ok(limiter)
}
