//! A run that diverges stops before saving that state; `--resume` refuses
//! flags, an iteration count, a tokenizer or stored settings it cannot honour.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use candle_core::{DType, Device};
use nrgpt_core::{Checkpoint, Vocab};
use trainer::vocab_file::tokenizer_json;

fn root(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nrgpt-guards-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

const TINY: &[&str] = &[
    "--d-model", "32", "--heads", "2", "--steps", "2", "--block", "32", "--batch", "8", "--warmup", "0", "--eval-iters", "2",
    "--eval-every", "5",
];

fn train(out: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trainer"))
        .current_dir(root(""))
        .env("RUST_BACKTRACE", "0")
        .arg("train")
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn load(out: &Path) -> Checkpoint {
    Checkpoint::from_bytes(&std::fs::read(out.join("ckpt.safetensors")).unwrap(), DType::F32, &Device::Cpu).unwrap()
}

fn iter_of(ck: &Checkpoint) -> u64 {
    let state: serde_json::Value = serde_json::from_str(&ck.meta["train_state"]).unwrap();
    state["iter"].as_u64().unwrap()
}

#[test]
fn a_diverging_run_stops_before_saving_that_state() {
    let out = tmp("lr100");
    let o = train(&out, &[TINY, &["--lr", "100", "--iters", "40"]].concat());
    let err = stderr(&o);
    assert!(!o.status.success(), "the run went on: {err}");
    assert!(err.contains("stopped at iteration") && err.contains("--lr 100") && err.contains("last good one is kept"), "{err}");
    // what is on disk is the last good state: it loads, and evaluates to a finite loss
    let ck = load(&out);
    let stopped: u64 = err.split("stopped at iteration ").nth(1).unwrap().split(':').next().unwrap().parse().unwrap();
    assert!(iter_of(&ck) <= stopped, "saved iteration {} after the stop at {stopped}", iter_of(&ck));
    let state: serde_json::Value = serde_json::from_str(&ck.meta["train_state"]).unwrap();
    assert!(state["val_loss"].as_f64().unwrap().is_finite());
}

#[test]
fn resume_refuses_what_it_cannot_honour() {
    let out = tmp("resume");
    let o = train(&out, &[TINY, &["--lr", "1e-2", "--iters", "10"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));

    for (flags, want) in [
        (vec!["--lr", "0.5"], "--lr 0.5 (the run has 0.01)"),
        (vec!["--d-model", "64"], "--d-model 64 (the run has 32)"),
        (vec!["--model", "gpt"], "--model \"gpt\" (the run has \"nrgpt-ff2w\")"),
        (vec!["--batch", "4"], "--batch 4 (the run has 8)"),
        (vec!["--iters", "5"], "--iters 5 is below the 10 iterations"),
    ] {
        let o = train(&out, &[&["--resume"], flags.as_slice()].concat());
        let err = stderr(&o);
        assert!(!o.status.success() && err.contains(want), "{flags:?}: {err}");
    }
    // the same values as stored are no change: accepted
    let o = train(&out, &["--resume", "--lr", "1e-2", "--d-model", "32", "--iters", "12"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(iter_of(&load(&out)), 12);

    // a tokenizer with two characters swapped: same length, different ids
    let text = std::fs::read_to_string(root("data/tinyshakespeare/input.txt")).unwrap();
    let mut chars = Vocab::from_text(&text).unwrap().chars().to_vec();
    chars.swap(10, 11);
    let swapped = out.join("swapped.json");
    std::fs::write(&swapped, tokenizer_json(&Vocab::from_chars(chars).unwrap()).unwrap()).unwrap();
    let o = train(&out, &["--resume", "--vocab", swapped.to_str().unwrap()]);
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("not the vocabulary this run was trained with") && err.contains("id 10"), "{err}");

    // stored settings no flag could give: eval_every = 0 (was a division by zero)
    let mut ck = load(&out);
    let mut state: serde_json::Value = serde_json::from_str(&ck.meta["train_state"]).unwrap();
    state["settings"]["eval_every"] = 0.into();
    ck.meta.insert("train_state".into(), state.to_string());
    std::fs::write(out.join("ckpt.safetensors"), ck.to_bytes().unwrap()).unwrap();
    let o = train(&out, &["--resume", "--iters", "20"]);
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("stored setting `eval_every` is 0") && !err.contains("panicked"), "{err}");
}

#[test]
fn ebt_flags_on_another_model_and_its_preset_on_another_model_are_refused_by_name() {
    for (model, extra) in [("gpt", &["--ebt-langevin", "0.5", "--ebt-truncate"][..]), ("nrgpt-ff2w", &["--ebt-update", "probs"][..]), ("gpt", &["--preset", "ebt-s2"][..])] {
        let out = tmp(&format!("not-ebt-{model}-{}", extra[0]));
        let o = train(&out, &[TINY, &["--model", model, "--iters", "2"], extra].concat());
        let err = stderr(&o);
        let named = if extra[0] == "--preset" { "--preset ebt-s2 is EBT's System-2 recipe; --model is gpt".to_string() } else { format!("{} only apply to --model ebt", extra.iter().filter(|a| a.starts_with("--")).copied().collect::<Vec<_>>().join(", ")) };
        assert!(!o.status.success() && err.contains(&named), "expected `{named}` in: {err}");
        assert!(!out.join("ckpt.safetensors").exists(), "nothing trained");
    }
}

#[test]
fn ebt_refuses_either_dropout_by_its_flag() {
    for flag in ["--dropout", "--attn-dropout"] {
        let out = tmp(&format!("ebt{flag}"));
        let o = train(&out, &[TINY, &["--model", "ebt", flag, "0.1", "--iters", "2"]].concat());
        let err = stderr(&o);
        assert!(!o.status.success() && err.contains(&format!("{flag} 0.1: dropout is not implemented for EBT")), "{err}");
        assert!(!out.join("ckpt.safetensors").exists(), "nothing trained");
    }
}

#[test]
fn a_second_trainer_on_a_run_folder_is_refused_and_a_kill_frees_it() {
    let out = tmp("lock");
    let mut first = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .current_dir(root(""))
        .arg("train")
        .args(TINY)
        .args(["--iters", "1000000", "--quiet", "--out"])
        .arg(&out)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !out.join("ckpt.safetensors").exists() {
        assert!(t0.elapsed().as_secs() < 120, "the first trainer never saved");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = train(&out, &["--resume"]);
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("another trainer is using"), "{err}");
    first.kill().unwrap();
    first.wait().unwrap();
    // the OS dropped the killed trainer's lock: resuming works
    let done = iter_of(&load(&out));
    let o = train(&out, &["--resume", "--iters", &(done + 1).to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
}
