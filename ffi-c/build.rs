//! Gives the shared library an ELF SONAME, so that programs linked against
//! an installed `libratomic.so` keep working across compatible upgrades and
//! refuse an incompatible one. ratomic is 0.x: every minor version may
//! break the ABI, so the SONAME carries major.minor (`libratomic.so.0.1`).

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if matches!(os.as_str(), "linux" | "android" | "freebsd" | "netbsd" | "openbsd" | "dragonfly") {
        let major = env!("CARGO_PKG_VERSION_MAJOR");
        let soname = if major == "0" {
            format!("libratomic.so.0.{}", env!("CARGO_PKG_VERSION_MINOR"))
        } else {
            format!("libratomic.so.{major}")
        };
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
