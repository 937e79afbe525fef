//! Compile the eBPF programs in bpf/ with clang into OUT_DIR.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    // Without the `bpf` feature the crate is only its ring records: nothing to compile.
    if std::env::var_os("CARGO_FEATURE_BPF").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // Every program includes bpf/common.h (the records shared with user space, the parsing).
    println!("cargo:rerun-if-changed=bpf/common.h");
    for prog in ["classify", "inline"] {
        let src = format!("bpf/{prog}.bpf.c");
        println!("cargo:rerun-if-changed={src}");
        let obj = out.join(format!("{prog}.bpf.o"));
        let status = Command::new(&clang)
            .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror", "-I/usr/include/x86_64-linux-gnu", "-c", &src, "-o"])
            .arg(&obj)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {clang} to build {src}: {e} (install clang, libbpf-dev and gcc-multilib: `make deps`)"));
        assert!(status.success(), "{clang} failed on {src}");
    }
    println!("cargo:rerun-if-env-changed=CLANG");
}
