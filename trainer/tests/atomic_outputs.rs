//! Every file a command writes goes through the one atomic writer: when the
//! write fails part way (here a file-size limit, as a full disk would), the
//! file that was there is untouched, no temp file is left, and the error
//! names the file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nrgpt-atomic-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `trainer ARGS` with writes past 512 bytes failing (EFBIG: SIGXFSZ is
/// ignored, so the write returns the error instead of killing the process).
fn trainer_with_small_disk(args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 1; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_trainer"))
        .args(args)
        .current_dir(root(""))
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap()
}

#[cfg(unix)]
#[test]
fn a_failed_write_keeps_the_old_file_and_names_it() {
    let d = tmp("outputs");
    let small = root("www/models/small.safetensors").display().to_string();
    let ebt = root("www/models/ebt.safetensors").display().to_string();
    let target = |name: &str| {
        let p = d.join(name);
        std::fs::write(&p, b"precious").unwrap();
        p.display().to_string()
    };
    let (vocab, trace, plot) = (target("tokenizer.json"), target("trace.json"), target("plot.svg"));
    let cases: [(&str, Vec<&str>); 3] = [
        (&vocab, vec!["vocab", "--out", &vocab]),
        (&trace, vec!["sample", "--ckpt", &small, "--len", "60", "--trace", &trace]),
        (&plot, vec!["think", "--ckpt", &ebt, "--max-chars", "300", "--steps", "1", "--samples", "1", "--plot", &plot]),
    ];
    for (file, args) in cases {
        let o = trainer_with_small_disk(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}: the write did not fail: {err}");
        assert!(err.contains(&format!("{file}.tmp")), "{args:?}: the error does not name the file: {err}");
        assert_eq!(std::fs::read(file).unwrap(), b"precious", "{args:?}: the old {file} was damaged");
        assert!(!Path::new(&format!("{file}.tmp")).exists(), "{args:?}: a temp file was left");
    }
}
