//! Compiles the XDP program (bpf/xlat_fast.bpf.c) with clang for the BPF target (Debian's
//! clang-14; `XLAT_CLANG` names another). Without clang the crate still builds: the object
//! is left empty and `FastPath::attach` says the fast path was not built, so the daemon runs
//! on its TUN device alone.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "bpf/xlat_fast.bpf.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=XLAT_CLANG");
    let Some(out_dir) = std::env::var_os("OUT_DIR") else {
        println!("cargo:warning=OUT_DIR is not set");
        return;
    };
    let out = PathBuf::from(out_dir).join("xlat_fast.o");
    let clang = std::env::var("XLAT_CLANG").unwrap_or_else(|_| "clang-14".into());
    let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "aarch64",
        _ => "x86_64",
    };
    let built = Command::new(&clang)
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
        .arg(format!("-I/usr/include/{arch}-linux-gnu"))
        .args(["-c", src, "-o"])
        .arg(&out)
        .status();
    match built {
        Ok(s) if s.success() => {}
        other => {
            println!(
                "cargo:warning=the XDP fast path is not built ({clang}: {other:?}); install clang-14 and libbpf-dev"
            );
            if let Err(e) = std::fs::write(&out, b"") {
                println!("cargo:warning=cannot write {}: {e}", out.display());
            }
        }
    }
}
