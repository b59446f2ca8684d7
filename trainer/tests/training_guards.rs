//! A run that diverges stops by name before saving that state; a run folder
//! is never replaced without --overwrite, and a damaged or lost log loses
//! neither the history nor the best model; `--resume` refuses flags, an
//! iteration count, a tokenizer or stored settings it cannot honour.

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

const TINY: &[&str] =
    &["--d-model", "32", "--heads", "2", "--steps", "2", "--block", "32", "--batch", "8", "--warmup", "0", "--eval-iters", "2", "--eval-every", "5"];

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

fn val_of(file: &Path) -> f64 {
    let ck = Checkpoint::from_bytes(&std::fs::read(file).unwrap(), DType::F32, &Device::Cpu).unwrap();
    let state: serde_json::Value = serde_json::from_str(&ck.meta["train_state"]).unwrap();
    state["val_loss"].as_f64().unwrap()
}

/// The lr-100 runs: a GPT's weights blow past the tensor bound on its
/// first update (the error was that bound, not divergence), an EBT's saved
/// a checkpoint of val 485 before the median rule had history.
#[test]
fn a_diverging_run_is_stopped_by_name_before_any_checkpoint_of_it() {
    let uniform = 65f64.ln();
    for model in [&["--model", "gpt"][..], &["--model", "ebt", "--layers", "1"]] {
        let out = tmp(&format!("lr100-{}", model[1]));
        let o = train(&out, &[TINY, model, &["--lr", "100", "--iters", "40"]].concat());
        let err = stderr(&o);
        assert!(!o.status.success(), "the run went on: {err}");
        assert!(err.contains("the run diverged at iteration") && err.contains("--lr 100"), "{err}");
        assert!(err.contains("holds iteration 0, the last good state") && err.contains("trainer train --resume --out"), "{err}");
        // nothing on disk is from past the divergence: both files are the fresh model's
        for file in ["ckpt.safetensors", "best.safetensors"] {
            let val = val_of(&out.join(file));
            assert!(val < 1.5 * uniform, "{model:?}: {file} has val {val}, far above the uniform {uniform}");
        }
    }
}

#[test]
fn a_fresh_run_into_a_folder_holding_a_run_is_refused_unless_overwrite() {
    let out = tmp("overwrite");
    assert!(train(&out, &[TINY, &["--iters", "10"]].concat()).status.success());
    let before: Vec<Vec<u8>> = ["ckpt.safetensors", "best.safetensors", "log.csv"].iter().map(|f| std::fs::read(out.join(f)).unwrap()).collect();
    let o = train(&out, &[TINY, &["--iters", "4"]].concat());
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("holds a run") && err.contains("--resume continues it, --overwrite replaces it"), "{err}");
    assert!(err.contains("ckpt.safetensors") && err.contains("best.safetensors") && err.contains("log.csv"), "{err}");
    let after: Vec<Vec<u8>> = ["ckpt.safetensors", "best.safetensors", "log.csv"].iter().map(|f| std::fs::read(out.join(f)).unwrap()).collect();
    assert!(before == after, "the refused run changed the folder");
    // a refused flag is reported as such, before the folder is looked at
    let o = train(&out, &[TINY, &["--iters", "4", "--gpt-block", "parallel"]].concat());
    assert!(!o.status.success() && stderr(&o).contains("gpt_block"), "{}", stderr(&o));
    let o = train(&out, &["--resume", "--overwrite"]);
    assert!(o.status.code() == Some(2) && stderr(&o).contains("--overwrite"), "{}", stderr(&o));
    let o = train(&out, &[TINY, &["--iters", "4", "--overwrite"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(iter_of(&load(&out)), 4);
    let log = std::fs::read_to_string(out.join("log.csv")).unwrap();
    assert!(!log.lines().any(|l| l.starts_with("10,")), "the old run's rows survived --overwrite: {log}");
}

/// Rewrites the val loss `best.safetensors` records, as if the run's best had been that good.
fn set_best_val(out: &Path, val: f64) {
    let path = out.join("best.safetensors");
    let mut ck = Checkpoint::from_bytes(&std::fs::read(&path).unwrap(), DType::F32, &Device::Cpu).unwrap();
    let mut state: serde_json::Value = serde_json::from_str(&ck.meta["train_state"]).unwrap();
    state["val_loss"] = val.into();
    ck.meta.insert("train_state".into(), state.to_string());
    std::fs::write(&path, ck.to_bytes().unwrap()).unwrap();
}

#[test]
fn a_damaged_or_lost_log_loses_neither_the_history_nor_the_best_model() {
    let out = tmp("log");
    assert!(train(&out, &[TINY, &["--lr", "1e-2", "--iters", "10"]].concat()).status.success());
    // the best so far is better than anything this short run can reach
    set_best_val(&out, 0.5);
    let best = std::fs::read(out.join("best.safetensors")).unwrap();
    let log = out.join("log.csv");
    let mut bytes = std::fs::read(&log).unwrap();
    let at = bytes.len() / 2;
    bytes[at] = 0xff;
    std::fs::write(&log, &bytes).unwrap();
    let o = train(&out, &["--resume", "--iters", "15"]);
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("log.csv is not UTF-8") && err.contains("move it aside"), "{err}");
    assert_eq!(std::fs::read(&log).unwrap(), bytes, "the damaged log was replaced");
    assert_eq!(iter_of(&load(&out)), 10, "the run went on");
    // an unparsable row is named with its line
    std::fs::write(&log, String::from_utf8_lossy(&bytes).replace('\u{fffd}', "x")).unwrap();
    let err = stderr(&train(&out, &["--resume", "--iters", "15"]));
    assert!(err.contains("log.csv is damaged: line"), "{err}");
    // a lost log: the run resumes, says what is gone, and the best model stays
    std::fs::remove_file(&log).unwrap();
    let o = train(&out, &["--resume", "--iters", "15"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("log.csv is missing: the log of iterations 0..10 is lost"), "{err}");
    assert!(std::fs::read(out.join("best.safetensors")).unwrap() == best, "best.safetensors was replaced by a worse model");
    let rows: Vec<String> = std::fs::read_to_string(&log).unwrap().lines().skip(1).map(String::from).collect();
    assert!(rows.first().is_some_and(|r| r.starts_with("10,")) && rows.last().is_some_and(|r| r.starts_with("15,")), "{rows:?}");
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
    for (model, extra) in
        [("gpt", &["--ebt-langevin", "0.5", "--ebt-truncate"][..]), ("nrgpt-ff2w", &["--ebt-update", "probs"][..]), ("gpt", &["--preset", "ebt-s2"][..])]
    {
        let out = tmp(&format!("not-ebt-{model}-{}", extra[0]));
        let o = train(&out, &[TINY, &["--model", model, "--iters", "2"], extra].concat());
        let err = stderr(&o);
        let named = if extra[0] == "--preset" {
            "--preset ebt-s2 is EBT's System-2 recipe; --model is gpt".to_string()
        } else {
            format!("{} only apply to --model ebt", extra.iter().filter(|a| a.starts_with("--")).copied().collect::<Vec<_>>().join(", "))
        };
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
