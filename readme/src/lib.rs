//! Nothing to use: this package builds the README's Rust programs from
//! the Markdown (`build.rs`, `src/bin/`) so that `tests/` can run them as
//! the README says.
