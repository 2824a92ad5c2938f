//! The `ratomic` command as a library, so its parts can be unit-tested:
//! workload generators, the simulation, summary statistics, the benchmark
//! and the command line itself. The binary (`src/main.rs`) only calls
//! [`cli::main_with`].

pub mod bench;
pub mod cli;
pub mod format;
pub mod limits;
pub mod rng;
pub mod simulate;
pub mod stats;
pub mod workload;
