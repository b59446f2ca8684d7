//! `--json`: each subcommand the bench calls prints one parseable object on
//! stdout, with the numbers its text line carries, while logs stay on stderr.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs the trainer with `args` and returns its stdout parsed as one JSON object.
fn json_of(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_trainer")).current_dir(root()).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "trainer {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    // Exactly one line, so a caller may parse all of stdout or its last line alike.
    assert_eq!(stdout.lines().count(), 1, "trainer {args:?}: stdout is not a single line: {stdout}");
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("trainer {args:?}: stdout is not JSON ({e}): {stdout}"));
    assert!(v.is_object(), "trainer {args:?}: not an object: {v}");
    v
}

fn num(v: &Value, key: &str) -> f64 {
    let x = v.get(key).and_then(Value::as_f64).unwrap_or_else(|| panic!("no number `{key}` in {v}"));
    assert!(x.is_finite(), "`{key}` is {x} in {v}");
    x
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_else(|| panic!("no string `{key}` in {v}"))
}

fn is_loss(x: f64) -> bool {
    x > 0.0 && x < 10.0
}

#[test]
fn subcommands_print_one_json_object() {
    let dir = std::env::temp_dir().join(format!("nrgpt-test-{}-json", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let ckpt = dir.join("ckpt.safetensors");
    let ck = ckpt.to_str().unwrap();

    let tiny = ["--d-model", "16", "--heads", "2", "--steps", "2", "--block", "16", "--batch", "4", "--eval-every", "2", "--eval-iters", "1"];
    let train = json_of(&[&["train"], &tiny[..], &["--iters", "3", "--out", d, "--quiet", "--json"]].concat());
    assert_eq!(num(&train, "iters"), 3.0, "{train}");
    assert!(num(&train, "tokens_per_s") > 0.0, "{train}");
    assert!(is_loss(num(&train, "train_loss")) && is_loss(num(&train, "val_loss")), "{train}");
    assert!(num(&train, "params") > 0.0 && num(&train, "seconds") >= 0.0, "{train}");
    assert_eq!(Path::new(text(&train, "ckpt")), ckpt);
    assert_eq!(Path::new(text(&train, "out")), dir);
    assert!(ckpt.is_file());

    // The flag is global: it may come before the subcommand too. A resumed
    // run reports the iterations the checkpoint has, not the flags.
    let resumed = json_of(&["--json", "train", "--out", d, "--resume", "--iters", "4", "--quiet"]);
    assert_eq!(num(&resumed, "iters"), 4.0, "{resumed}");
    assert_eq!(num(&resumed, "params"), num(&train, "params"), "{resumed}");

    let eval = json_of(&["eval", "--ckpt", ck, "--max-chars", "400", "--json"]);
    assert_eq!(text(&eval, "split"), "val");
    assert!(is_loss(num(&eval, "loss")), "{eval}");
    assert_eq!(num(&eval, "chars"), 400.0, "{eval}");
    assert_eq!(num(&eval, "steps"), 2.0, "{eval}");
    assert_eq!(Path::new(text(&eval, "ckpt")), ckpt);
    let on_train = json_of(&["eval", "--ckpt", ck, "--split", "train", "--max-chars", "400", "--json"]);
    assert_eq!(text(&on_train, "split"), "train");
    assert!(is_loss(num(&on_train, "loss")), "{on_train}");

    let energy = json_of(&["energy", "--ckpt", ck, "--windows", "2", "--json"]);
    assert!((0.0..=1.0).contains(&num(&energy, "monotone_fraction")), "{energy}");
    assert_eq!(num(&energy, "tokens"), 2.0 * 16.0, "2 windows of 16: {energy}");
    assert_eq!(num(&energy, "steps"), 2.0, "{energy}");
    assert_eq!(text(&energy, "eta"), "stable");

    let int8 = dir.join("int8.safetensors");
    let export = json_of(&["export", "--ckpt", ck, "--out", int8.to_str().unwrap(), "--quant", "int8", "--json"]);
    assert_eq!(num(&export, "params"), num(&train, "params"), "{export}");
    assert_eq!(num(&export, "bytes"), std::fs::metadata(&int8).unwrap().len() as f64, "{export}");
    assert!((0.0..1.0).contains(&num(&export, "ratio_to_f32")), "int8 is smaller than f32: {export}");
    assert_eq!(text(&export, "scheme"), "int8");
    let int8_eval = json_of(&["eval", "--ckpt", int8.to_str().unwrap(), "--max-chars", "400", "--json"]);
    assert!(is_loss(num(&int8_eval, "loss")), "{int8_eval}");

    let sample = json_of(&["sample", "--ckpt", ck, "--prompt", "AB", "--len", "12", "--json"]);
    assert_eq!(text(&sample, "prompt"), "AB");
    assert_eq!(text(&sample, "text").chars().count(), 12, "{sample}");

    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_json_the_text_line_stays() {
    let out = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .current_dir(root())
        .args(["eval", "--ckpt", "www/models/default.safetensors", "--max-chars", "2000"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("val loss ") && stdout.contains(" nats/char over 2000 characters"), "{stdout}");
}
