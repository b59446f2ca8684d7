//! Options at and past their edges: each is refused with a message naming
//! the option (clap's usage error, exit 2), never a panic or an abort, and
//! `--top-k 0` means what it means on the page (no cut).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

/// The shipped small model (int8, block 64): loads in milliseconds.
fn small() -> String {
    root("www/models/small.safetensors").display().to_string()
}

fn trainer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trainer")).current_dir(root("")).args(args).output().unwrap()
}

fn refused(args: &[&str], names: &str) {
    let o = trainer(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: exit {:?}, stderr {err}", o.status);
    assert!(err.contains(names) && !err.contains("panicked"), "{args:?}: {err}");
}

#[test]
fn out_of_range_options_are_usage_errors() {
    let ck = small();
    refused(&["eval", "--ckpt", &ck, "--batch", "0"], "--batch");
    refused(&["eval", "--ckpt", &ck, "--max-chars", "0"], "--max-chars");
    refused(&["eval", "--ckpt", &ck, "--steps", "0"], "--steps");
    refused(&["eval", "--ckpt", &ck, "--steps", "1000000000"], "--steps");
    refused(&["sample", "--ckpt", &ck, "--len", "18446744073709551615"], "--len");
    refused(&["sample", "--ckpt", &ck, "--len", "1000000000000"], "--len");
    refused(&["sample", "--ckpt", &ck, "--temperature", "NaN"], "--temperature");
    refused(&["sample", "--ckpt", &ck, "--temperature=-1"], "--temperature");
    refused(&["sample", "--ckpt", &ck, "--top-p", "0"], "--top-p");
    refused(&["energy", "--ckpt", &ck, "--windows", "0"], "--windows");
    for (flag, v) in [
        ("--lr", "NaN"),
        ("--lr", "0"),
        ("--batch", "0"),
        ("--d-model", "18446744073709551615"),
        ("--steps", "0"),
        ("--eval-every", "0"),
        ("--eval-iters", "0"),
        ("--dropout", "1"),
        ("--grad-clip", "inf"),
        ("--grad-clip", "-1"),
        ("--weight-decay", "-0.1"),
        ("--ff-mult", "0"),
    ] {
        // `=` joins the value, so a negative one is not read as a flag
        let arg = format!("{flag}={v}");
        refused(&["train", &arg, "--out", "/nonexistent/never-created"], flag);
    }
    // a config choice outside its names is refused with the names it takes
    for (flag, names) in [
        ("--norm", "`layer-norm` or `rms-norm`"),
        ("--eta", "`stable` or `free`"),
        ("--activation", "`gelu` or `relu`"),
        ("--eta-init", "`identity` or `normal`"),
        ("--block-norm", "`gain` or `bare`"),
        ("--gpt-block", "`sequential` or `parallel`"),
    ] {
        refused(&["train", flag, "Stable", "--out", "/nonexistent/never-created"], flag);
        refused(&["train", flag, "Stable", "--out", "/nonexistent/never-created"], names);
    }
}

#[test]
fn too_short_a_split_is_a_clear_error() {
    let o = trainer(&["eval", "--ckpt", &small(), "--max-chars", "50"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("no full window") && err.contains("65"), "{err}");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("NaN"));
}

#[test]
fn top_k_zero_keeps_every_character() {
    let ck = small();
    let text = |extra: &[&str]| {
        let mut args = vec!["sample", "--ckpt", &ck, "--len", "60", "--seed", "3"];
        args.extend_from_slice(extra);
        let o = trainer(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let all = text(&[]);
    assert_eq!(text(&["--top-k", "0"]), all, "--top-k 0 is no cut");
    assert_ne!(text(&["--top-k", "1"]), all, "--top-k 1 is greedy, a different text");
}

/// `--preset reference` stores the reference's choices in the checkpoint's
/// config, a flag given beside it wins, and a resumed run holds to them.
#[test]
fn preset_reference_sets_the_reference_options() {
    let out = std::env::temp_dir().join(format!("nrgpt-preset-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let base =
        ["train", "--d-model", "32", "--heads", "2", "--steps", "2", "--block", "16", "--batch", "2", "--eval-every", "100", "--eval-iters", "1", "--quiet"];
    let run = |extra: &[&str]| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--out", out.to_str().unwrap()]);
        trainer(&args)
    };
    let o = run(&["--iters", "1", "--preset", "reference", "--attn-beta", "0.5"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ck =
        nrgpt_core::Checkpoint::from_bytes(&std::fs::read(out.join("ckpt.safetensors")).unwrap(), candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
    let c = &ck.config;
    assert_eq!((c.attn_beta, c.attn_diag, c.head_dim), (Some(0.5), true, 32), "the given --attn-beta wins");
    assert_eq!((c.eta, c.eta_init, c.block_norm), (nrgpt_core::EtaKind::Free, nrgpt_core::EtaInit::Normal, nrgpt_core::BlockNorm::Bare));
    // resuming with the preset alone asks for beta 1: refused, naming the flag
    let o = run(&["--iters", "2", "--preset", "reference", "--resume"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--attn-beta"), "{err}");
    let o = run(&["--iters", "2", "--resume"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // for gpt-rec the preset is the reference's GPT_Rec_parallel: the parallel block with ReLU
    let _ = std::fs::remove_dir_all(&out);
    let o = run(&["--iters", "1", "--model", "gpt-rec", "--preset", "reference"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ck =
        nrgpt_core::Checkpoint::from_bytes(&std::fs::read(out.join("ckpt.safetensors")).unwrap(), candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
    assert_eq!((ck.config.gpt_block, ck.config.activation), (nrgpt_core::GptBlock::Parallel, nrgpt_core::Activation::Relu));
    assert!(!ck.config.attn_diag && ck.config.attn_beta.is_none(), "NRGPT's choices stay off a GPT");
    // and an NRGPT refuses the parallel block by name
    let o = run(&["--iters", "1", "--gpt-block", "parallel"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("gpt_block"), "{}", String::from_utf8_lossy(&o.stderr));
    let _ = std::fs::remove_dir_all(&out);
}
