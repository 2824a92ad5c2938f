//! Copies the README's marked Rust programs into `OUT_DIR`, where
//! `src/bin/*.rs` include them: a block follows a line
//! `<!-- example:<name> ... -->` and is the next fenced block
//! (```` ```rust,ignore ````: rustdoc, which runs the README's other Rust
//! blocks as the `ratomic` crate's doc tests, cannot build a program that
//! needs axum). A marker without its block fails the build.

use std::path::PathBuf;

/// The programs, by marker name, and the file each is written to.
const PROGRAMS: &[(&str, &str)] = &[("rust-server", "shared_server.rs")];

fn main() {
    let readme = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("../README.md");
    println!("cargo:rerun-if-changed={}", readme.display());
    let text = std::fs::read_to_string(&readme).unwrap_or_else(|e| panic!("{}: {e}", readme.display()));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    for (name, file) in PROGRAMS {
        let code = block_after(&text, &format!("<!-- example:{name} "))
            .unwrap_or_else(|| panic!("README.md has no ```rust,ignore block after a `<!-- example:{name} ` marker"));
        std::fs::write(out.join(file), code).unwrap();
    }
}

/// The body of the first ```` ```rust,ignore ```` block after the line
/// starting with `marker`.
fn block_after(text: &str, marker: &str) -> Option<String> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(marker));
    lines.next()?;
    let mut lines = lines.skip_while(|l| *l != "```rust,ignore");
    lines.next()?;
    let mut code = String::new();
    for line in lines {
        if line == "```" {
            return Some(code);
        }
        code.push_str(line);
        code.push('\n');
    }
    None
}
