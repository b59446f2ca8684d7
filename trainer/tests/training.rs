//! The trainer end to end: short runs learn, a killed run resumes exactly,
//! and the trained NRGPT still descends its energy.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};
use nrgpt_core::{Checkpoint, Vocab};

fn root(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nrgpt-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn trainer(args: &[&str], out: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_trainer"));
    c.current_dir(root("")).arg("train").args(args).arg("--out").arg(out).arg("--quiet");
    c
}

const TINY: &[&str] =
    &["--d-model", "32", "--heads", "2", "--steps", "2", "--block", "32", "--batch", "16", "--lr", "1e-2", "--warmup", "20", "--eval-iters", "5"];

/// (iter, val_loss) of the eval rows of a run's log.
fn eval_rows(log: &str) -> Vec<(usize, f64)> {
    log.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((f[0].parse().ok()?, f[5].parse().ok()?))
        })
        .collect()
}

/// Entropy of the train split's character frequencies: what a model that
/// ignores context can reach (~3.3 nats).
fn unigram_entropy() -> f64 {
    let text = std::fs::read_to_string(root("data/tinyshakespeare/input.txt")).unwrap();
    let vocab = Vocab::from_text(&text).unwrap();
    let ids = vocab.encode(&text).unwrap();
    let train = &ids[..ids.len() * 9 / 10];
    let mut counts = vec![0f64; vocab.len()];
    train.iter().for_each(|&i| counts[i as usize] += 1.0);
    let n = train.len() as f64;
    counts.iter().filter(|&&c| c > 0.0).map(|&c| -(c / n) * (c / n).ln()).sum()
}

#[test]
fn short_runs_beat_the_unigram_baseline() {
    let unigram = unigram_entropy();
    assert!((3.2..3.4).contains(&unigram), "unigram entropy {unigram}");
    for model in ["nrgpt-ff2w", "nrgpt-ff1", "gpt", "gpt-rec"] {
        let out = tmp(model);
        let st = trainer(TINY, &out).args(["--model", model, "--iters", "300", "--eval-every", "100"]).status().unwrap();
        assert!(st.success(), "{model}: trainer failed");
        let rows = eval_rows(&std::fs::read_to_string(out.join("log.csv")).unwrap());
        let (last_iter, val) = *rows.last().unwrap();
        assert_eq!(last_iter, 300);
        eprintln!("{model}: val {val:.4} after 300 iters (unigram {unigram:.4})");
        assert!(val < unigram - 0.6, "{model}: val loss {val} is not well below the unigram {unigram}");
        assert!(out.join("ckpt.safetensors").exists());
        best_checkpoint_is_the_lowest_val(&out, &rows);
        if model == "nrgpt-ff2w" {
            trained_model_descends(&out.join("ckpt.safetensors"));
        }
    }
}

/// best.safetensors holds the weights of the eval with the lowest val estimate.
fn best_checkpoint_is_the_lowest_val(out: &Path, rows: &[(usize, f64)]) {
    let (best_iter, best_val) = rows.iter().copied().fold((0, f64::INFINITY), |b, r| if r.1 < b.1 { r } else { b });
    let ck = Checkpoint::from_bytes(&std::fs::read(out.join("best.safetensors")).unwrap(), DType::F32, &Device::Cpu).unwrap();
    let state: serde_json::Value = serde_json::from_str(&ck.meta["train_state"]).unwrap();
    assert_eq!(state["iter"].as_u64(), Some(best_iter as u64), "best checkpoint from the wrong eval: {state}");
    assert_eq!(state["val_loss"].as_f64(), Some(best_val));
    assert!(ck.extra.is_empty(), "the best checkpoint carries no optimizer state");
    // a loadable model with every parameter the run has
    let last = Checkpoint::from_bytes(&std::fs::read(out.join("ckpt.safetensors")).unwrap(), DType::F32, &Device::Cpu).unwrap();
    assert_eq!(ck.weights.keys().collect::<Vec<_>>(), last.weights.keys().collect::<Vec<_>>());
}

/// An EBT on the candle oracle learns from thinking alone (regularisers on), resumes (on the
/// default fast backend), and evaluates with more thinking steps and
/// candidates than it trained with.
#[test]
fn ebt_learns_by_thinking_and_resumes() {
    let unigram = unigram_entropy();
    let out = tmp("ebt");
    let args = [
        "--model",
        "ebt",
        "--layers",
        "1",
        "--ebt-noise",
        "0",
        "--eval-every",
        "100",
        "--backend",
        "candle",
        "--ebt-langevin",
        "0.01",
        "--ebt-step-jitter",
        "--ebt-extra-steps",
        "1",
        "--ebt-step-lr-mult",
        "5",
    ];
    let st = trainer(TINY, &out).args(args).args(["--iters", "200"]).status().unwrap();
    assert!(st.success(), "ebt: trainer failed");
    let st = trainer(&[], &out).args(["--resume", "--iters", "220"]).status().unwrap();
    assert!(st.success(), "ebt: resume failed");
    let rows = eval_rows(&std::fs::read_to_string(out.join("log.csv")).unwrap());
    let (last_iter, val) = *rows.last().unwrap();
    assert_eq!(last_iter, 220);
    eprintln!("ebt: val {val:.4} after 220 iters (unigram {unigram:.4})");
    assert!(val < unigram - 0.2, "ebt: val loss {val} is not below the unigram {unigram}");
    let cli = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_trainer")).current_dir(root("")).args(args).arg("--ckpt").arg(out.join("ckpt.safetensors")).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(o.status.success(), "{args:?}: {text} {}", String::from_utf8_lossy(&o.stderr));
        text
    };
    let eval: serde_json::Value = serde_json::from_str(&cli(&["--json", "eval", "--max-chars", "2000", "--steps", "4"])).unwrap();
    // the thinking table reads every (S, N) off one set of trajectories: its S = 4, N = 1 cell is `eval --steps 4`
    let table: serde_json::Value = serde_json::from_str(&cli(&["--json", "think", "--max-chars", "2000", "--steps", "1,4", "--samples", "1,2"])).unwrap();
    let cell = |s: u64, n: u64| {
        let cells = table[0]["table"]["cells"].as_array().unwrap();
        cells.iter().find(|c| c["steps"] == s && c["samples"] == n).unwrap()["loss"].as_f64().unwrap()
    };
    let want = eval["loss"].as_f64().unwrap();
    assert!((cell(4, 1) - want).abs() < 1e-6, "think S=4 N=1 {} vs eval {want}", cell(4, 1));
    // from z = 0 every candidate thinks alike: verification has nothing to choose
    assert_eq!(cell(4, 2), cell(4, 1));
    assert!(cell(1, 1) != cell(4, 1), "thinking longer changed nothing");
    assert!(table[0]["table"]["energy_loss_corr"].as_f64().unwrap().is_finite());
    // sampling thinks per character: the same seed gives the same text, another seed another one
    let sample = |seed: &str, samples: &str| cli(&["sample", "--len", "40", "--prompt", "ROMEO:", "--seed", seed, "--samples", samples, "--steps", "4"]);
    let a = sample("1", "1");
    assert_eq!(a, sample("1", "1"), "EBT sampling is not reproducible");
    assert!(a.trim_end().chars().count() >= "ROMEO:".len() + 30, "EBT sample too short: {a:?}");
    assert_ne!(a, sample("2", "1"), "the seed changed nothing");
    assert!(!sample("1", "3").is_empty());
}

/// On the trained NRGPT, each token's own step lowers its energy with the
/// earlier tokens held (the discrete form of Prop 2.1 at the learned c).
fn trained_model_descends(ckpt: &Path) {
    let ck = Checkpoint::from_bytes(&std::fs::read(ckpt).unwrap(), DType::F64, &Device::Cpu).unwrap();
    let model = ck.model().unwrap();
    let block = model.nrgpt_block().unwrap();
    let ids = ck.vocab.encode("ROMEO:\nWhat light through").unwrap();
    let mut x = model.embed(&Tensor::from_slice(&ids, (1, ids.len()), &Device::Cpu).unwrap()).unwrap();
    let (mut ok, mut total) = (0, 0);
    for _ in 0..ck.config.steps {
        let out = block.step(&x, true, None, None).unwrap();
        let before: Vec<f64> = out.energy.unwrap().flatten_all().unwrap().to_vec1().unwrap();
        for a in 0..ids.len() {
            let mixed = Tensor::cat(&[x.narrow(1, 0, a).unwrap(), out.x_next.narrow(1, a, 1).unwrap()], 1).unwrap();
            let g = block.normed(&mixed).unwrap();
            let e: Vec<f64> = block.energy_grad(&g, true).unwrap().energy.unwrap().flatten_all().unwrap().to_vec1().unwrap();
            total += 1;
            if e[a] <= before[a] + 1e-9 {
                ok += 1;
            }
        }
        x = out.x_next;
    }
    eprintln!("trained nrgpt-ff2w: {ok}/{total} own steps lowered the energy");
    assert_eq!(ok, total, "the trained model's step raised some token's energy");
}

/// The columns that must replay exactly: iter, lr, loss, grad_norm, train_loss, val_loss.
fn replayable(log: &str) -> Vec<String> {
    log.lines().map(|l| l.split(',').take(6).collect::<Vec<_>>().join(",")).collect()
}

#[test]
fn a_killed_run_resumes_exactly() {
    let args = ["--model", "nrgpt-ff2w", "--iters", "400", "--eval-every", "100", "--dropout", "0.1"];
    let whole = tmp("whole");
    assert!(trainer(TINY, &whole).args(args).status().unwrap().success());

    let broken = tmp("broken");
    let mut child = trainer(TINY, &broken).args(args).spawn().unwrap();
    let t0 = Instant::now();
    loop {
        let log = std::fs::read_to_string(broken.join("log.csv")).unwrap_or_default();
        if log.lines().any(|l| l.starts_with("150,")) {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "the run ended before it could be killed");
        assert!(t0.elapsed() < Duration::from_secs(300), "the run never reached iteration 150");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let ck = Checkpoint::from_bytes(&std::fs::read(broken.join("ckpt.safetensors")).unwrap(), DType::F32, &Device::Cpu).unwrap();
    assert!(ck.meta["train_state"].contains("\"iter\":100"), "{}", ck.meta["train_state"]);

    let st = trainer(&[], &broken).arg("--resume").status().unwrap();
    assert!(st.success(), "resume failed");
    let a = replayable(&std::fs::read_to_string(whole.join("log.csv")).unwrap());
    let b = replayable(&std::fs::read_to_string(broken.join("log.csv")).unwrap());
    assert_eq!(a.len(), b.len(), "logs differ in length");
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x, y, "log line {i} differs after resume");
    }
}

#[test]
fn bad_inputs_get_clear_errors() {
    let out = tmp("bad");
    std::fs::create_dir_all(&out).unwrap();
    let junk = out.join("junk.safetensors");
    std::fs::write(&junk, b"definitely not a checkpoint").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_trainer")).args(["sample", "--ckpt"]).arg(&junk).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not a safetensors file"), "{err}");

    let o = trainer(&[], &out).arg("--resume").output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("to resume"));

    let o = Command::new(env!("CARGO_BIN_EXE_trainer")).args(["train", "--model", "lstm"]).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown model"));
}
