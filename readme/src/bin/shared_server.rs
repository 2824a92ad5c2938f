// The README's axum server on a shared file ("Processes of one host"),
// exactly as the README shows it: build.rs copies the block out of the
// Markdown. readme/tests/workers.rs runs it as four processes.
include!(concat!(env!("OUT_DIR"), "/shared_server.rs"));
