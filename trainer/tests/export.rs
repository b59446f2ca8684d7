//! `trainer export` end to end: a trained model, exported at every scheme,
//! keeps its validation loss (measured over the whole split) while the file
//! shrinks, and the other commands run the quantized files unchanged.

use std::path::{Path, PathBuf};
use std::process::Command;

use candle_core::{DType, Device};
use nrgpt_core::Checkpoint;
use trainer::data::Corpus;
use trainer::eval::full_loss;
use trainer::net::{Net, Thinking};

fn root(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn trainer(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_trainer")).current_dir(root("")).args(args).output().unwrap();
    if !out.status.success() {
        panic!("trainer {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    out
}

const TINY: &[&str] = &[
    "--d-model",
    "32",
    "--heads",
    "2",
    "--steps",
    "2",
    "--block",
    "32",
    "--batch",
    "16",
    "--lr",
    "1e-2",
    "--warmup",
    "20",
    "--eval-iters",
    "5",
    "--eval-every",
    "100",
    "--iters",
    "300",
    "--model",
    "nrgpt-ff2w",
    "--quiet",
];

/// Loss over the whole validation split, computed in f64 so the gaps compared
/// below (down to 0.002 nats) are far above the arithmetic's own error.
fn val_loss(ckpt: &Path, corpus: &Corpus) -> f64 {
    let ck = Checkpoint::from_bytes(&std::fs::read(ckpt).unwrap(), DType::F64, &Device::Cpu).unwrap();
    full_loss(&Net::new(&ck.config, &ck.weights).unwrap(), &corpus.val, 64, Thinking::default(), &mut |_, _| {}).unwrap()
}

#[test]
fn exported_models_keep_their_loss() {
    let dir = std::env::temp_dir().join(format!("nrgpt-test-{}-export", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_s = dir.to_str().unwrap();
    trainer(&[&["train"], TINY, &["--out", dir_s]].concat());
    let ckpt = dir.join("ckpt.safetensors");
    let trained = Checkpoint::from_bytes(&std::fs::read(&ckpt).unwrap(), DType::F32, &Device::Cpu).unwrap();
    let corpus = Corpus::load(&root("data/tinyshakespeare/input.txt"), &trained.vocab).unwrap();

    let mut loss = std::collections::BTreeMap::new();
    let mut size = std::collections::BTreeMap::new();
    for scheme in ["f32", "f16", "int8", "int4"] {
        let out = dir.join(format!("model-{scheme}.safetensors"));
        let o = trainer(&["export", "--ckpt", ckpt.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quant", scheme]);
        let msg = String::from_utf8_lossy(&o.stdout);
        eprint!("{msg}");
        let bytes = std::fs::metadata(&out).unwrap().len();
        assert!(msg.contains(&format!("{bytes} bytes")), "export reported the wrong size: {msg}");
        assert!(!out.with_extension("tmp").exists(), "temp file left behind");
        size.insert(scheme, bytes);
        loss.insert(scheme, val_loss(&out, &corpus));
    }

    // the f32 export is the trained model exactly, minus the optimizer state
    let f32_export = Checkpoint::from_bytes(&std::fs::read(dir.join("model-f32.safetensors")).unwrap(), DType::F32, &Device::Cpu).unwrap();
    assert!(f32_export.extra.is_empty() && f32_export.meta.is_empty());
    assert!(!trained.extra.is_empty());
    for (name, t) in &trained.weights {
        let (a, b): (Vec<f32>, Vec<f32>) = (t.flatten_all().unwrap().to_vec1().unwrap(), f32_export.weights[name].flatten_all().unwrap().to_vec1().unwrap());
        assert_eq!(a, b, "{name} changed in the f32 export");
    }

    let gap = |s: &str| loss[s] - loss["f32"];
    eprintln!(
        "val loss over {} chars: f32 {:.5} | f16 {:.5} ({:+.5}) | int8 {:.5} ({:+.5}) | int4 {:.5} ({:+.5})",
        corpus.val.len(),
        loss["f32"],
        loss["f16"],
        gap("f16"),
        loss["int8"],
        gap("int8"),
        loss["int4"],
        gap("int4")
    );
    eprintln!(
        "file sizes: ckpt (with optimizer) {} | f32 {} | f16 {} | int8 {} ({:.1}%) | int4 {} ({:.1}%)",
        std::fs::metadata(&ckpt).unwrap().len(),
        size["f32"],
        size["f16"],
        size["int8"],
        100.0 * size["int8"] as f64 / size["f32"] as f64,
        size["int4"],
        100.0 * size["int4"] as f64 / size["f32"] as f64
    );
    assert!(loss["f32"] < 2.9, "the tiny model did not learn: {}", loss["f32"]);
    assert!(gap("f16").abs() <= 0.002, "f16 moved the loss by {}", gap("f16"));
    assert!(gap("int8").abs() <= 0.01, "int8 moved the loss by {}", gap("int8"));
    assert!(gap("int4").is_finite() && gap("int4").abs() < 0.5, "int4 moved the loss by {}", gap("int4"));
    assert!((size["int8"] as f64) < 0.35 * size["f32"] as f64, "int8 file {} vs f32 {}", size["int8"], size["f32"]);
    assert!(size["int4"] < size["int8"] && size["int8"] < size["f16"] && size["f16"] < size["f32"]);

    // the other commands take the quantized files unchanged
    let int8 = dir.join("model-int8.safetensors");
    let o = trainer(&["eval", "--ckpt", int8.to_str().unwrap(), "--batch", "64"]);
    let msg = String::from_utf8_lossy(&o.stdout);
    let cli_loss: f64 = msg.split_whitespace().nth(2).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{msg}"));
    assert!((cli_loss - loss["int8"]).abs() < 1e-3, "trainer eval says {cli_loss}, the test {}", loss["int8"]);
    let int4 = dir.join("model-int4.safetensors");
    let o = trainer(&["sample", "--ckpt", int4.to_str().unwrap(), "--len", "40"]);
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("ROMEO:\n"));

    // a bad scheme is refused by name
    let o = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(["export", "--ckpt", ckpt.to_str().unwrap(), "--out", "/dev/null", "--quant", "int3"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown quantization scheme `int3`"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
