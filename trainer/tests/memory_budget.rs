//! Nothing a flag, a stored setting, a prompt or an input file asks for can
//! make the trainer allocate past the native budget or read without end:
//! each is refused promptly with a message naming it (issue 39, class 1).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use candle_core::{DType, Device};
use nrgpt_core::format::Integrity;
use nrgpt_core::model::init_weights;
use nrgpt_core::{Arch, Checkpoint, ModelConfig};

fn root(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nrgpt-budget-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the trainer; returns its output and how long it took.
fn trainer(args: &[&str]) -> (Output, Duration) {
    let t = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_trainer")).current_dir(root("")).env("RUST_BACKTRACE", "0").args(args).output().unwrap();
    (o, t.elapsed())
}

/// Refused within a few seconds (exit 1, no abort), the message containing every one of `names`.
fn refused(args: &[&str], names: &[&str]) -> String {
    let (o, took) = trainer(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{args:?}: exit {:?}, stderr {err}", o.status);
    assert!(took < Duration::from_secs(20), "{args:?} took {took:?}");
    for n in names {
        assert!(err.contains(n), "{args:?}: `{n}` not in {err}");
    }
    assert!(!err.contains("memory allocation") && !err.contains("panicked"), "{err}");
    err
}

#[test]
fn training_flags_past_the_budget_are_refused_before_anything_is_made() {
    let d = dir("flags");
    let out = d.join("run");
    let out = out.to_str().unwrap();
    refused(&["train", "--block", "65536", "--out", out], &["refusing to train", "past the native memory budget", "driven by block_size=65536"]);
    refused(&["train", "--batch", "65536", "--out", out], &["refusing to train", "driven by --batch=65536"]);
    assert!(!Path::new(out).exists(), "a refused run made its folder");
}

#[test]
fn a_stored_batch_past_the_budget_is_refused_on_resume() {
    let d = dir("resume");
    let out = d.join("run");
    let out = out.to_str().unwrap();
    let tiny = ["--d-model", "8", "--heads", "1", "--steps", "1", "--block", "8", "--batch", "2", "--eval-iters", "1", "--quiet"];
    let (o, _) = trainer(&[&["train", "--iters", "1", "--out", out][..], &tiny].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ckpt = Path::new(out).join("ckpt.safetensors");
    let mut ck = Checkpoint::from_bytes(&std::fs::read(&ckpt).unwrap(), DType::F32, &Device::Cpu).unwrap();
    let mut state: serde_json::Value = serde_json::from_str(&ck.meta["train_state"]).unwrap();
    state["settings"]["batch"] = serde_json::json!(1_000_000_000_000u64);
    ck.meta.insert("train_state".into(), state.to_string());
    std::fs::write(&ckpt, ck.to_bytes().unwrap()).unwrap();
    refused(&["train", "--resume", "--out", out, "--iters", "2", "--quiet"], &["resuming", "driven by the stored batch=1000000000000"]);
}

#[test]
fn a_prompt_whose_window_is_past_the_budget_is_refused() {
    // an in-range file with a long block and a small width: it loads (the
    // engine's key cache is linear in the block), but the reference forward
    // over a 60,000-character window would need ~150 GB of attention scores
    let d = dir("prompt");
    let vocab = nrgpt_core::Vocab::from_tokenizer_json(&std::fs::read_to_string(root("www/tokenizer.json")).unwrap()).unwrap();
    let mut cfg = ModelConfig::new(Arch::NrgptFf2w, vocab.len(), 4, 1, 1, 65536);
    cfg.head_dim = 4;
    let weights = init_weights(&cfg, 1, DType::F32, &Device::Cpu).unwrap();
    let ck = Checkpoint { config: cfg, vocab, weights, extra: BTreeMap::new(), meta: BTreeMap::new(), integrity: Integrity::Verified };
    let path = d.join("long.safetensors");
    std::fs::write(&path, ck.to_quant_bytes(nrgpt_core::format::Scheme::Int8).unwrap()).unwrap();
    let path = path.to_str().unwrap();
    let prompt = "a".repeat(60_000);
    refused(&["sample", "--ckpt", path, "--prompt", &prompt, "--len", "5"], &["refusing to sample", "driven by the prompt + --len=60005"]);
    let (o, _) = trainer(&["sample", "--ckpt", path, "--prompt", "ROMEO:", "--len", "5"]);
    assert!(o.status.success(), "a short prompt on the same file samples: {}", String::from_utf8_lossy(&o.stderr));
    // eval runs whole windows: 65,536 characters at once
    let data = d.join("corpus.txt");
    std::fs::write(&data, "ROMEO: ".repeat(30_000)).unwrap();
    refused(&["eval", "--ckpt", path, "--data", data.to_str().unwrap(), "--split", "train"], &["refusing to evaluate", "driven by block_size=65536"]);
}

#[test]
fn inputs_that_are_not_regular_files_are_refused_by_name_without_blocking() {
    let small = root("www/models/small.safetensors");
    let small = small.to_str().unwrap();
    refused(&["eval", "--ckpt", small, "--data", "/dev/zero", "--max-chars", "4096"], &["/dev/zero", "not a regular file"]);
    refused(&["eval", "--ckpt", "/dev/zero"], &["the checkpoint /dev/zero", "not a regular file"]);
    let d = dir("fifo");
    let fifo = d.join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    // no writer ever opens it: opening it to read would block for good
    refused(&["eval", "--ckpt", small, "--data", fifo.to_str().unwrap()], &["fifo", "not a regular file"]);
    refused(&["train", "--vocab", fifo.to_str().unwrap(), "--out", d.join("run").to_str().unwrap()], &["the vocabulary", "not a regular file"]);
}

#[test]
fn max_chars_stops_the_read() {
    // 12k real characters, then 3 GiB of a sparse hole: only the read that
    // stops after the first 4,096 characters (and 10/9 of them to be sure
    // they are train) can succeed: the rest is NULs, outside the vocabulary
    let d = dir("max-chars");
    let data = d.join("huge.txt");
    let text = std::fs::read_to_string(root("data/tinyshakespeare/input.txt")).unwrap();
    std::fs::write(&data, &text[..12_000]).unwrap();
    std::fs::OpenOptions::new().write(true).open(&data).unwrap().set_len(3 << 30).unwrap();
    let small = root("www/models/small.safetensors");
    let (o, took) = trainer(&["eval", "--ckpt", small.to_str().unwrap(), "--data", data.to_str().unwrap(), "--split", "train", "--max-chars", "4096"]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && stdout.contains("over 4096 characters"), "{stdout} {}", String::from_utf8_lossy(&o.stderr));
    assert!(took < Duration::from_secs(20), "{took:?}");
    // without --max-chars the whole file is read: refused by its size, at once
    refused(&["eval", "--ckpt", small.to_str().unwrap(), "--data", data.to_str().unwrap()], &["holds 3221225472 bytes, more than the"]);
}

#[test]
fn a_log_linked_to_a_device_is_not_read_without_end() {
    let d = dir("log");
    let out = d.join("run");
    let out_s = out.to_str().unwrap();
    let tiny = ["--d-model", "8", "--heads", "1", "--steps", "1", "--block", "8", "--batch", "2", "--eval-iters", "1", "--quiet"];
    let (o, _) = trainer(&[&["train", "--iters", "1", "--out", out_s][..], &tiny].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_file(out.join("log.csv")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", out.join("log.csv")).unwrap();
    // the log readers stop at once (whether the run then goes on or stops is the resume's call)
    let (_, took) = trainer(&["train", "--resume", "--out", out_s, "--iters", "2", "--quiet"]);
    assert!(took < Duration::from_secs(60), "{took:?}");
}
