//! Compiles the XDP programs (bpf/xlat_fast.bpf.c, the fast path; bpf/lab_rx.bpf.c, the lab
//! tester's receive counter; bpf/lab_tx.bpf.c, its NIC-like ingress) with clang for the BPF target (Debian's
//! clang-14; `XLAT_CLANG` names another). Without clang the crate still builds: the object
//! is left empty and `FastPath::attach` says the fast path was not built, so the daemon runs
//! on its TUN device alone.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=XLAT_CLANG");
    let Some(out_dir) = std::env::var_os("OUT_DIR") else {
        println!("cargo:warning=OUT_DIR is not set");
        return;
    };
    let clang = std::env::var("XLAT_CLANG").unwrap_or_else(|_| "clang-14".into());
    // Rebuild when the compiler or the libbpf headers appear or change: a build made before
    // `apt-get install clang-14 libbpf-dev` must not keep its empty objects for good. A path
    // that does not exist makes cargo run this script on every build (it is cheap).
    println!("cargo:rerun-if-changed={}", on_path(&clang).display());
    println!("cargo:rerun-if-changed=/usr/include/bpf/bpf_helpers.h");
    let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "aarch64",
        _ => "x86_64",
    };
    // The lab's receive counter uses atomic fetch-and-or, which needs BPF ISA v3 (Linux 5.12+).
    for (src, obj, cpu) in [
        ("bpf/xlat_fast.bpf.c", "xlat_fast.o", None),
        ("bpf/lab_rx.bpf.c", "lab_rx.o", Some("-mcpu=v3")),
        ("bpf/lab_tx.bpf.c", "lab_tx.o", None),
    ] {
        println!("cargo:rerun-if-changed={src}");
        let out = PathBuf::from(&out_dir).join(obj);
        let built = Command::new(&clang)
            .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
            .args(cpu)
            .arg(format!("-I/usr/include/{arch}-linux-gnu"))
            .args(["-c", src, "-o"])
            .arg(&out)
            .status();
        match built {
            Ok(s) if s.success() => {}
            other => {
                println!(
                    "cargo:warning={src} is not built ({clang}: {other:?}); install clang-14 and libbpf-dev"
                );
                if let Err(e) = std::fs::write(&out, b"") {
                    println!("cargo:warning=cannot write {}: {e}", out.display());
                }
            }
        }
    }
}

/// Where `cmd` is found on PATH (or `cmd` itself when it names a path); where Debian would
/// install it when it is nowhere.
fn on_path(cmd: &str) -> PathBuf {
    if cmd.contains('/') {
        return PathBuf::from(cmd);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(cmd))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("/usr/bin").join(cmd))
}
