//! Messages name their subject (the file, the option, the tensor), say what
//! is wrong with it in a line, and options a model would ignore are refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn root(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nrgpt-named-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn model(name: &str) -> String {
    root(&format!("www/models/{name}.safetensors")).display().to_string()
}

/// Runs the trainer, killing it if it has not finished within 60 s (a read
/// that blocks would otherwise hang the suite).
fn trainer(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(args)
        .current_dir(root(""))
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("trainer {args:?} was still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn refused(args: &[&str]) -> String {
    let o = trainer(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{args:?} was accepted: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[cfg(unix)]
#[test]
fn a_fifo_or_device_as_an_input_file_is_refused_by_name_without_blocking() {
    let d = tmp("fifo");
    let fifo = d.join("data");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let fifo = fifo.display().to_string();
    let small = model("small");
    for (args, file, kind) in [
        (vec!["eval", "--ckpt", &small, "--data", &fifo], fifo.as_str(), "a FIFO"),
        (vec!["eval", "--ckpt", "/dev/zero"], "/dev/zero", "a device"),
        (vec!["vocab", "--data", &fifo, "--out", "/nonexistent/never-written"], &fifo, "a FIFO"),
        (vec!["train", "--data", "/dev/zero", "--out", "/nonexistent/never-written"], "/dev/zero", "a device"),
    ] {
        let err = refused(&args);
        assert!(err.contains(&format!("{file} is {kind}, not a regular file")), "{args:?}: {err}");
    }
}

#[test]
fn an_ood_text_too_short_to_think_over_is_named() {
    let d = tmp("ood");
    let empty = d.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let err = refused(&["think", "--ckpt", &model("ebt"), "--ood", empty.to_str().unwrap(), "--max-chars", "300", "--steps", "1", "--samples", "1"]);
    assert!(err.contains("empty.txt has 0 characters") && err.contains("--ood needs at least one window"), "{err}");
}

#[test]
fn a_deep_listops_expression_is_not_repeated_whole() {
    let expr = format!("{}1{}", "S(".repeat(10_000), ")".repeat(10_000));
    let err = refused(&["listops-answer", "--ckpt", &model("listops"), "--expr", &expr]);
    assert!(err.contains("nested") && err.contains("(30001 characters)"), "{err}");
    assert!(err.len() < 1000, "the message is {} bytes long", err.len());
}

#[test]
fn thinking_options_on_a_model_that_does_not_think_are_refused_by_name() {
    let small = model("small");
    let err = refused(&["sample", "--ckpt", &small, "--len", "5", "--samples", "4", "--early-exit", "0.1"]);
    assert!(err.contains("--samples, --early-exit only apply to an EBT") && err.contains("is a nrgpt-ff2w"), "{err}");
    let err = refused(&["sample", "--ckpt", &small, "--len", "5", "--accept-lower"]);
    assert!(err.contains("--accept-lower only applies to an EBT"), "{err}");
    let err = refused(&["eval", "--ckpt", &small, "--max-chars", "500", "--samples", "2"]);
    assert!(err.contains("--samples only applies to an EBT"), "{err}");
    // the defaults are not "given": the same commands without them run
    assert!(trainer(&["sample", "--ckpt", &small, "--len", "5"]).status.success());
    // and an EBT takes them
    assert!(trainer(&["sample", "--ckpt", &model("ebt"), "--len", "3", "--samples", "2", "--early-exit", "0.1"]).status.success());
}
