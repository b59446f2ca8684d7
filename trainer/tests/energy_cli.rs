//! `trainer energy` on the shipped default: a fraction in [0, 1] that the
//! stable eta keeps high, and a clear refusal when no step is left to judge.

use std::process::Command;

fn energy(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_trainer"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(["energy", "--ckpt", "www/models/default.safetensors", "--windows", "4"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn energy_reports_the_monotone_fraction() {
    let out = energy(&[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let frac: f64 = text.split(':').nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    assert!((0.5..=1.0).contains(&frac), "stable eta: most tokens descend monotonically, got {frac} in {text}");
    let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../www/models/default.safetensors")).unwrap();
    let block = nrgpt_core::Checkpoint::from_bytes(&bytes, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap().config.block_size;
    // one token per position of each full window
    assert!(text.contains(&format!("of {} tokens", 4 * block)), "4 windows of {block}: {text}");
}

#[test]
fn energy_refuses_a_transient_as_long_as_the_run() {
    let out = energy(&["--skip", "4"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("leaves no step to judge"));
}
