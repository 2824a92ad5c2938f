//! Generates `include/ratomic.h` from the `ratomic-ffi` crate with cbindgen,
//! or, with `--check`, fails if the committed header differs from a fresh
//! generation.
//!
//! cbindgen is used as a library here rather than as an installed tool: its
//! version is pinned by the workspace's Cargo.lock, so everyone (and CI)
//! generates byte-identical headers, and nothing is installed globally.
//!
//! ```text
//! cargo run -p ratomic-ffi-header            # rewrite include/ratomic.h
//! cargo run -p ratomic-ffi-header -- --check # exit 1 on drift
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let check = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--check") => true,
        Some(other) => {
            eprintln!("usage: ratomic-ffi-header [--check]  (unknown argument {other:?})");
            return ExitCode::from(2);
        }
    };
    let ffi_dir = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("header-gen lives in ffi-c/").to_path_buf();
    let header_path: PathBuf = ffi_dir.parent().expect("ffi-c lives in the workspace").join("include/ratomic.h");

    let mut config = match cbindgen::Config::from_file(ffi_dir.join("cbindgen.toml")) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot read ffi-c/cbindgen.toml: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The version macros come from Cargo: this generator shares the
    // workspace version with ratomic-ffi (both use `version.workspace`).
    let version = format!(
        concat!(
            "\n/** The header's major version (compare with ratomic_version() for a mismatch). */",
            "\n#define RATOMIC_VERSION_MAJOR {}",
            "\n/** The header's minor version: while the major version is 0, each minor version may change the ABI. */",
            "\n#define RATOMIC_VERSION_MINOR {}",
            "\n/** The header's patch version. */",
            "\n#define RATOMIC_VERSION_PATCH {}",
            "\n/** The header's version as a string, e.g. \"0.1.0\"; ratomic_version() gives the library's. */",
            "\n#define RATOMIC_VERSION_STRING \"{}\"\n",
        ),
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_PATCH"),
        env!("CARGO_PKG_VERSION"),
    );
    config.after_includes = Some(config.after_includes.take().unwrap_or_default() + &version);

    let bindings = match cbindgen::Builder::new().with_crate(&ffi_dir).with_config(config).generate() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cbindgen failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);

    if check {
        let committed = std::fs::read(&header_path).unwrap_or_default();
        if committed == fresh {
            println!("{} is up to date", header_path.display());
            ExitCode::SUCCESS
        } else {
            eprintln!(
                "{} differs from a fresh generation: run `cargo run -p ratomic-ffi-header` and commit the result",
                header_path.display()
            );
            ExitCode::FAILURE
        }
    } else {
        if let Err(e) = std::fs::write(&header_path, &fresh) {
            eprintln!("cannot write {}: {e}", header_path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", header_path.display());
        ExitCode::SUCCESS
    }
}
