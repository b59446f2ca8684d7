//! `cargo xtask bench`: one table measured in one run on this machine —
//! quality (val/train loss, f32 and int8), trainer throughput against PyTorch
//! CPU, decode speed and dispatches, page speed, energy monotonicity — written
//! to BENCH.md with a loss-curve figure (the README's "where we stand" and
//! docs/figures.md are edited by hand). `--smoke` runs a tiny version (CI): tiny
//! models, a few iterations, no PyTorch download, nothing written.
//!
//! Training runs are deterministic (seeded) and live in runs/bench/<name>; a
//! finished run is reused, an unfinished one resumed, so a second bench run
//! costs only the evaluations.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::plot::{Panel, Series, COLOURS};
use crate::{root, run, say};

/// The smoke run uses the dev-profile binaries `cargo test` already built (CI
/// builds nothing extra); the real run the release ones.
pub(crate) fn bin(smoke: bool, name: &str) -> String {
    format!("target/{}/{name}", if smoke { "debug" } else { "release" })
}

const BENCH_MD: &str = "BENCH.md";
const FIGURE: &str = "www/figures/loss-curves.svg";
/// PyTorch from PyPI, in a venv of its own under target/.
const VENV: &str = "target/bench-venv";
const TORCH_SCRIPT: &str = "xtask/python/torch_trainer.py";
/// The evaluation rows of the shipped default's training log (its run took hours: not redone by the bench).
const DEFAULT_RUN: &str = "www/models/default-training.csv";
const DEFAULT_MODEL: &str = "www/models/default.safetensors";

/// One model of the quality table: a size class, a name and its trainer flags.
struct Spec {
    size: &'static str,
    name: &'static str,
    flags: &'static [&'static str],
}

struct Plan {
    specs: Vec<Spec>,
    /// Iterations per size class.
    iters: fn(&str) -> usize,
    common: &'static [&'static str],
    /// Evaluation length for the train split (and the val split in smoke).
    eval_chars: Option<usize>,
    throughput: &'static [(&'static str, &'static [&'static str])],
    throughput_iters: usize,
    energy_windows: &'static str,
}

fn full_plan() -> Plan {
    let s = |name, flags| Spec { size: "S", name, flags };
    let m = |name, flags| Spec { size: "M", name, flags };
    Plan {
        specs: vec![
            s("nrgpt-ff2w", &["--model", "nrgpt-ff2w", "--d-model", "128", "--heads", "4", "--steps", "4"]),
            s("nrgpt-ff2w free eta", &["--model", "nrgpt-ff2w", "--d-model", "128", "--heads", "4", "--steps", "4", "--eta", "free"]),
            s("nrgpt-ff1", &["--model", "nrgpt-ff1", "--d-model", "128", "--heads", "4", "--steps", "4", "--ff-mult", "8"]),
            s("gpt (4 layers)", &["--model", "gpt", "--d-model", "64", "--heads", "4", "--steps", "4"]),
            s("gpt-rec (1 layer x4)", &["--model", "gpt-rec", "--d-model", "120", "--heads", "4", "--steps", "4"]),
            m("nrgpt-ff2w", &["--model", "nrgpt-ff2w", "--d-model", "256", "--heads", "8", "--steps", "4", "--ff-mult", "5"]),
            m("nrgpt-ff1", &["--model", "nrgpt-ff1", "--d-model", "256", "--heads", "8", "--steps", "4", "--ff-mult", "10"]),
            m("gpt (4 layers)", &["--model", "gpt", "--d-model", "128", "--heads", "4", "--steps", "4"]),
            m("gpt-rec (1 layer x4)", &["--model", "gpt-rec", "--d-model", "256", "--heads", "8", "--steps", "4"]),
        ],
        iters: |size| if size == "S" { 400 } else { 200 },
        common: &["--block", "64", "--batch", "32", "--eval-every", "100", "--eval-iters", "10"],
        eval_chars: Some(111_540), // the train-split loss over as many characters as the val split has
        throughput: &[
            ("nrgpt-ff2w d=128 T=4", &["--model", "nrgpt-ff2w", "--d-model", "128", "--heads", "4", "--steps", "4"]),
            ("gpt 4 layers d=128", &["--model", "gpt", "--d-model", "128", "--heads", "4", "--steps", "4"]),
            ("ebt 2 layers d=128 S=2", &["--model", "ebt", "--d-model", "128", "--heads", "4", "--layers", "2", "--steps", "2"]),
        ],
        throughput_iters: 20,
        energy_windows: "64",
    }
}

fn smoke_plan() -> Plan {
    let s = |name, flags| Spec { size: "S", name, flags };
    Plan {
        specs: vec![
            s("nrgpt-ff2w", &["--model", "nrgpt-ff2w", "--d-model", "16", "--heads", "2", "--steps", "2"]),
            s("nrgpt-ff2w free eta", &["--model", "nrgpt-ff2w", "--d-model", "16", "--heads", "2", "--steps", "2", "--eta", "free"]),
            s("gpt (2 layers)", &["--model", "gpt", "--d-model", "16", "--heads", "2", "--steps", "2"]),
        ],
        iters: |_| 6,
        common: &["--block", "16", "--batch", "4", "--eval-every", "3", "--eval-iters", "2"],
        eval_chars: Some(2000),
        throughput: &[("nrgpt-ff2w d=16 T=2", &["--model", "nrgpt-ff2w", "--d-model", "16", "--heads", "2", "--steps", "2", "--block", "16", "--batch", "4"])],
        throughput_iters: 3,
        energy_windows: "4",
    }
}

fn slug(size: &str, name: &str) -> String {
    let s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    format!("{}-{}", size.to_lowercase(), s.split('-').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-"))
}

/// Runs `cmd` in the repository root and returns its stdout (stderr passes through).
fn capture(cmd: &mut Command) -> Result<String> {
    eprintln!("    $ {}", format!("{cmd:?}").replace('"', ""));
    let out = cmd.current_dir(root()).stderr(Stdio::inherit()).output().with_context(|| format!("starting {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed with {}: {}", out.status, String::from_utf8_lossy(&out.stdout));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The object a trainer subcommand printed with `--json`, and the command
/// line, so a missing field names the command that lacked it.
pub(crate) struct Reply {
    cmd: String,
    value: Value,
}

impl Reply {
    pub(crate) fn value(&self) -> &Value {
        &self.value
    }

    pub(crate) fn f64(&self, key: &str) -> Result<f64> {
        self.value.get(key).and_then(Value::as_f64).with_context(|| format!("`{}` printed no number `{key}` in {}", self.cmd, self.value))
    }

    pub(crate) fn usize(&self, key: &str) -> Result<usize> {
        let n = self.value.get(key).and_then(Value::as_u64).with_context(|| format!("`{}` printed no count `{key}` in {}", self.cmd, self.value))?;
        usize::try_from(n).with_context(|| format!("`{}`: `{key}` = {n} does not fit a usize", self.cmd))
    }
}

/// Runs a trainer subcommand with `--json` and parses the object it prints as
/// its last stdout line, so the bench never depends on the human-readable text.
pub(crate) fn trainer_json(cmd: &mut Command) -> Result<Reply> {
    cmd.arg("--json");
    let line = format!("{cmd:?}").replace('"', "");
    let stdout = capture(cmd)?;
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty()).with_context(|| format!("`{line}` printed nothing on stdout"))?;
    let value = serde_json::from_str(last).with_context(|| format!("`{line}` did not print JSON: {last}"))?;
    Ok(Reply { cmd: line, value })
}

/// The first number after `key` in `text` (the PyTorch script's `key value` lines).
fn number_after(text: &str, key: &str) -> Result<f64> {
    let i = text.find(key).with_context(|| format!("no `{key}` in: {text}"))? + key.len();
    let num: String = text[i..].trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-').collect();
    num.parse().with_context(|| format!("no number after `{key}` in: {text}"))
}

fn last_log_iter(log: &Path) -> Option<(usize, bool)> {
    let text = std::fs::read_to_string(log).ok()?;
    let last = text.lines().last()?;
    let cols: Vec<&str> = last.split(',').collect();
    Some((cols.first()?.parse().ok()?, cols.get(5).is_some_and(|v| !v.is_empty())))
}

/// (iteration, train estimate, val estimate) at each evaluation of a run
/// (the rows with estimates); a log that cannot be read is an error, not
/// an empty curve.
pub(crate) fn eval_points(log: &Path) -> Result<Vec<(f64, f64, f64)>> {
    let text = std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    Ok(text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            Some((c.first()?.parse().ok()?, c.get(4)?.parse().ok()?, c.get(5)?.parse().ok()?))
        })
        .collect())
}

/// Whether the run in `dir` reached `iters` iterations and evaluated there.
pub(crate) fn run_finished(dir: &Path, iters: usize) -> bool {
    last_log_iter(&dir.join("log.csv")).is_some_and(|(it, evaluated)| it == iters && evaluated) && dir.join("ckpt.safetensors").is_file()
}

/// `trainer train` of `iters` iterations into `dir`: a resume when a
/// checkpoint is there (true), else a fresh run with `flags`.
pub(crate) fn train_cmd(trainer: &str, dir: &Path, iters: usize, flags: &[&str]) -> (Command, bool) {
    let resume = dir.join("ckpt.safetensors").is_file();
    let mut cmd = Command::new(trainer);
    cmd.arg("train").arg("--out").arg(dir).args(["--iters", &iters.to_string(), "--quiet"]);
    if resume {
        cmd.arg("--resume");
    } else {
        cmd.args(flags);
    }
    (cmd, resume)
}

struct Quality {
    size: &'static str,
    name: &'static str,
    params: usize,
    iters: usize,
    val_f32: f64,
    val_int8: f64,
    train_f32: f64,
    int8_bytes: u64,
    dir: PathBuf,
}

fn train_and_eval(trainer: &str, plan: &Plan, spec: &Spec, base: &Path) -> Result<Quality> {
    let dir = base.join(slug(spec.size, spec.name));
    let iters = (plan.iters)(spec.size);
    let ckpt = dir.join("ckpt.safetensors");
    let t0 = Instant::now();
    if run_finished(&dir, iters) {
        say(&format!("{} {}: reusing the finished run in {}", spec.size, spec.name, dir.display()));
    } else {
        let flags: Vec<&str> = spec.flags.iter().chain(plan.common).copied().collect();
        let (mut cmd, resume) = train_cmd(trainer, &dir, iters, &flags);
        say(&format!("{} {}: training {iters} iterations into {}{}", spec.size, spec.name, dir.display(), if resume { " (resuming)" } else { "" }));
        let trained = trainer_json(&mut cmd)?;
        if trained.usize("iters")? != iters {
            bail!("`{}` stopped at {} iterations, not {iters}", trained.cmd, trained.value["iters"]);
        }
        eprintln!("    trained in {:.0} s", t0.elapsed().as_secs_f64());
    }
    let int8 = dir.join("int8.safetensors");
    let export = trainer_json(Command::new(trainer).arg("export").arg("--ckpt").arg(&ckpt).arg("--out").arg(&int8).args(["--quant", "int8"]))?;
    let eval = |file: &Path, split: &str, max: Option<usize>| -> Result<f64> {
        let mut cmd = Command::new(trainer);
        cmd.arg("eval").arg("--ckpt").arg(file).args(["--split", split]);
        if let Some(m) = max {
            cmd.args(["--max-chars", &m.to_string()]);
        }
        trainer_json(&mut cmd)?.f64("loss")
    };
    let val_max = if plan.eval_chars == Some(111_540) { None } else { plan.eval_chars };
    Ok(Quality {
        size: spec.size,
        name: spec.name,
        params: export.usize("params")?,
        iters,
        val_f32: eval(&ckpt, "val", val_max)?,
        val_int8: eval(&int8, "val", val_max)?,
        train_f32: eval(&ckpt, "train", plan.eval_chars)?,
        int8_bytes: export.usize("bytes")? as u64,
        dir,
    })
}

/// A venv with PyTorch (used on the CPU only) and safetensors (the EBT twin reads our checkpoints).
fn ensure_torch() -> Result<PathBuf> {
    let py = root().join(VENV).join("bin/python");
    if py.is_file() && Command::new(&py).args(["-c", "import torch, safetensors"]).stderr(Stdio::null()).status().is_ok_and(|s| s.success()) {
        return Ok(py);
    }
    // PyPI's Linux torch will not even import without its CUDA wheels, so all
    // of them come along although only the CPU is used.
    say(&format!("installing PyTorch from PyPI into {VENV} (several GB with the CUDA libraries it needs to import; once)"));
    run(Command::new("python3").args(["-m", "venv", VENV]))?;
    run(Command::new(&py).args(["-m", "pip", "install", "-q", "torch", "safetensors"]))?;
    Ok(py)
}

/// PyTorch's speed in one mode, or why that mode could not run here.
enum TorchSpeed {
    Tokens(f64),
    Failed(String),
}

struct Throughput {
    name: &'static str,
    ours: f64,
    /// Eager and torch.compile; None in smoke.
    torch: Option<(TorchSpeed, TorchSpeed)>,
}

impl Throughput {
    /// The faster PyTorch mode that ran: the one the ratio is taken against.
    fn best_torch(&self) -> Option<f64> {
        let (e, c) = self.torch.as_ref()?;
        [e, c].into_iter().filter_map(|s| if let TorchSpeed::Tokens(v) = s { Some(*v) } else { None }).reduce(f64::max)
    }
}

/// The `MODE_tokens_per_s` line of the PyTorch script, or its `MODE_failed` reason.
fn torch_speed(out: &str, mode: &str) -> Result<TorchSpeed> {
    if let Some(l) = out.lines().find_map(|l| l.strip_prefix(&format!("{mode}_failed "))) {
        return Ok(TorchSpeed::Failed(l.trim().to_string()));
    }
    Ok(TorchSpeed::Tokens(number_after(out, &format!("{mode}_tokens_per_s"))?))
}

/// Our EBT's training loss against the PyTorch twin's on the same weights,
/// batch and noise: the twin differentiates through autograd's dE/dz
/// (create_graph), ours through ebt.rs's hand-written one, so a throughput
/// row only compares equal work if they agree. Returns (ours, torch) for the
/// loss and the gradient norm.
fn ebt_twin_check(trainer: &str, py: &Path) -> Result<TwinCheck> {
    say("EBT twin check: our training loss and gradient norm vs the PyTorch twin's on one batch");
    let dir = root().join("target/bench-ebt-check");
    let _ = std::fs::remove_dir_all(&dir);
    let run = dir.join("run");
    let flags = ["--model", "ebt", "--d-model", "64", "--heads", "4", "--layers", "2", "--steps", "2", "--block", "32", "--batch", "8"];
    // Three steps, so the weights are not the init's; then iteration 3 runs on
    // the saved weights, and its log row holds the loss the twin must reproduce.
    let common = ["--eval-every", "3", "--eval-iters", "1", "--quiet"];
    trainer_json(Command::new(trainer).arg("train").args(flags).args(common).args(["--iters", "3", "--out"]).arg(&run))?;
    let ckpt = dir.join("at3.safetensors");
    std::fs::copy(run.join("ckpt.safetensors"), &ckpt).context("copying the EBT checkpoint")?;
    trainer_json(Command::new(trainer).arg("train").args(["--resume", "--iters", "4"]).args(common).arg("--out").arg(&run))?;
    let log = std::fs::read_to_string(run.join("log.csv")).context("reading the EBT check's log")?;
    // the training row of iteration 3: iter,lr,loss,grad_norm,...
    let row: Vec<&str> = log
        .lines()
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|c| c[0] == "3" && !c[2].is_empty())
        .context("no training row for iteration 3 in the EBT check's log")?;
    let (ours_loss, ours_norm): (f64, f64) = (row[2].parse()?, row[3].parse()?);
    let mut cmd = Command::new(py);
    cmd.arg(TORCH_SCRIPT).arg("--check-ckpt").arg(&ckpt).args(["--check-iter", "3"]);
    let reply: Value = serde_json::from_str(capture(&mut cmd)?.lines().last().unwrap_or_default()).context("the twin's check did not print JSON")?;
    let num = |k: &str| reply.get(k).and_then(Value::as_f64).with_context(|| format!("the twin's check printed no `{k}`: {reply}"));
    let (torch_loss, torch_norm) = (num("loss")?, num("grad_norm")?);
    eprintln!("    loss ours {ours_loss} torch {torch_loss}; gradient norm ours {ours_norm} torch {torch_norm}");
    if (ours_loss - torch_loss).abs() > 1e-4 || (ours_norm - torch_norm).abs() > 1e-4 * ours_norm.abs().max(1.0) {
        bail!("the PyTorch EBT twin disagrees with our trainer: loss {torch_loss} vs {ours_loss}, gradient norm {torch_norm} vs {ours_norm}");
    }
    Ok([(ours_loss, torch_loss), (ours_norm, torch_norm)])
}

/// `cargo xtask torch-check`: only the EBT twin check, without the hour-long bench.
pub fn torch_check() -> Result<()> {
    run(Command::new("cargo").args(["build", "--release", "-p", "trainer", "--bin", "trainer"]))?;
    let [(ol, tl), (on, tn)] = ebt_twin_check(&bin(false, "trainer"), &ensure_torch()?)?;
    println!(
        "EBT twin check passed: loss ours {ol} PyTorch {tl} (|diff| {:.1e}), gradient norm ours {on} PyTorch {tn} (|diff| {:.1e})",
        (ol - tl).abs(),
        (on - tn).abs()
    );
    Ok(())
}

/// The EBT twin check: (ours, PyTorch's) loss, then (ours, PyTorch's) gradient norm.
type TwinCheck = [(f64, f64); 2];

fn throughput(trainer: &str, plan: &Plan, smoke: bool) -> Result<(Vec<Throughput>, Option<TwinCheck>)> {
    let torch = if smoke { None } else { Some(ensure_torch()?) };
    let check = match &torch {
        Some(py) if plan.throughput.iter().any(|(_, f)| f.contains(&"ebt")) => Some(ebt_twin_check(trainer, py)?),
        _ => None,
    };
    let mut rows = Vec::new();
    for (name, flags) in plan.throughput {
        say(&format!("trainer throughput: {name}"));
        let tmp = root().join("target/bench-throughput");
        let _ = std::fs::remove_dir_all(&tmp);
        let mut cmd = Command::new(trainer);
        cmd.arg("train")
            .args(*flags)
            .args(["--iters", &plan.throughput_iters.to_string(), "--eval-every", "100000", "--eval-iters", "1", "--quiet", "--out"])
            .arg(&tmp);
        let ours = trainer_json(&mut cmd)?.f64("tokens_per_s")?;
        let torch = match &torch {
            Some(py) => {
                let mut cmd = Command::new(py);
                cmd.arg(TORCH_SCRIPT).args(*flags).args(["--iters", &plan.throughput_iters.to_string(), "--modes", "eager,compiled"]);
                let out = capture(&mut cmd)?;
                Some((torch_speed(&out, "eager")?, torch_speed(&out, "compiled")?))
            }
            None => None,
        };
        rows.push(Throughput { name, ours, torch });
    }
    Ok((rows, check))
}

pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    format!("{cpu}, {cores} cores, no GPU")
}

pub(crate) fn today() -> String {
    Command::new("date").arg("+%Y-%m-%d").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default()
}

pub fn bench(smoke: bool) -> Result<()> {
    let t0 = Instant::now();
    let plan = if smoke { smoke_plan() } else { full_plan() };
    let base = root().join(if smoke { "target/bench-smoke" } else { "runs/bench" });
    if smoke {
        let _ = std::fs::remove_dir_all(&base);
    }
    say("building the trainer and the decode benchmark");
    if smoke {
        // the test build's own binaries and examples, with its feature set: right
        // after `cargo test --workspace` this builds nothing (a `cargo build -p`
        // would resolve other features and rebuild shared dependencies)
        run(Command::new("cargo").args(["test", "--workspace", "--no-run"]))?;
    } else {
        run(Command::new("cargo").args(["build", "--release", "-p", "nrgpt-engine", "--example", "decode_bench"]))?;
        run(Command::new("cargo").args(["build", "--release", "-p", "trainer", "--bin", "trainer"]))?;
    }
    let trainer = bin(smoke, "trainer");
    let trainer = trainer.as_str();

    let mut quality = Vec::new();
    for spec in &plan.specs {
        quality.push(train_and_eval(trainer, &plan, spec, &base)?);
    }

    let mut energy = Vec::new();
    for q in quality.iter().filter(|q| q.size == "S" && q.name.starts_with("nrgpt-ff2w")) {
        say(&format!("energy monotonicity: {}", q.name));
        let ckpt = q.dir.join("ckpt.safetensors");
        let mut row = vec![q.name.to_string()];
        for (steps, skip) in [(None, "1"), (Some("16"), "4")] {
            let mut cmd = Command::new(trainer);
            cmd.arg("energy").arg("--ckpt").arg(&ckpt).args(["--skip", skip, "--windows", plan.energy_windows]);
            if let Some(s) = steps {
                cmd.args(["--steps", s]);
            }
            row.push(format!("{:.3}", trainer_json(&mut cmd)?.f64("monotone_fraction")?));
        }
        energy.push(row);
    }

    let (tput, ebt_check) = throughput(trainer, &plan, smoke)?;

    say("decode speed (crates/engine/examples/decode_bench: CPU engine, wgpu, full recompute)");
    let mut cmd = Command::new(root().join(bin(smoke, "examples/decode_bench")));
    if smoke {
        cmd.arg("--quick");
    }
    let decode = capture(&mut cmd)?;

    let page = if smoke {
        None
    } else {
        say("page speed in headless Chromium (the browser test)");
        Some(crate::browser_test_output()?)
    };

    let default_eval = if Path::new(&root().join(DEFAULT_MODEL)).is_file() && !smoke {
        Some(capture(Command::new(trainer).args(["eval", "--ckpt", DEFAULT_MODEL]))?.trim().to_string())
    } else {
        None
    };

    let mut md = String::new();
    let cmd_name = if smoke { "cargo xtask bench --smoke" } else { "cargo xtask bench" };
    let _ = writeln!(md, "Measured by `{cmd_name}` on {} ({}), in {:.0} min.\n", machine(), today(), t0.elapsed().as_secs_f64() / 60.0);
    let _ = writeln!(md, "**Quality** (Tiny Shakespeare, nats/char; val = whole val split, train = first {} train characters; {}, lr 3e-3 cosine, same seed and data order for every model):\n", plan.eval_chars.unwrap_or(0), plan.common.join(" "));
    let _ = writeln!(md, "| size | model | params | iters | val f32 | val int8 | int8 cost | train f32 | gap (val - train) | int8 file |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    for q in &quality {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.4} | {:.4} | {:+.4} | {:.4} | {:+.4} | {:.0} kB |",
            q.size,
            q.name,
            q.params,
            q.iters,
            q.val_f32,
            q.val_int8,
            q.val_int8 - q.val_f32,
            q.train_f32,
            q.val_f32 - q.train_f32,
            q.int8_bytes as f64 / 1000.0
        );
    }
    if let Some(e) = &default_eval {
        let _ = writeln!(md, "\nShipped default (`trainer eval --ckpt {DEFAULT_MODEL}`): {e}. Goal: <= 1.50 from <= 1 MB.");
    }
    let _ = writeln!(md, "\n**Trainer throughput** (tokens/s, batch 32 x 64, {} iterations after warm-up; PyTorch: `{TORCH_SCRIPT}`, same model and batch, same machine, same run; the ratio is against the faster of eager and torch.compile):\n", plan.throughput_iters);
    let _ = writeln!(md, "| model | ours | PyTorch eager | PyTorch torch.compile | ours / faster PyTorch |");
    let _ = writeln!(md, "|---|---|---|---|---|");
    let mut failures = Vec::new();
    for t in &tput {
        let mut cell = |s: &TorchSpeed| match s {
            TorchSpeed::Tokens(v) => format!("{v:.0}"),
            TorchSpeed::Failed(why) => {
                failures.push(format!("{}: {why}", t.name));
                format!("failed ({})", failures.len())
            }
        };
        let (eager, compiled) = match &t.torch {
            Some((e, c)) => (cell(e), cell(c)),
            None => ("not run (smoke)".into(), "not run (smoke)".into()),
        };
        let ratio = t.best_torch().map_or("-".into(), |v| format!("{:.2}", t.ours / v));
        let _ = writeln!(md, "| {} | {:.0} | {eager} | {compiled} | {ratio} |", t.name, t.ours);
    }
    for (i, f) in failures.iter().enumerate() {
        let _ = writeln!(md, "\n({}) {f}", i + 1);
    }
    if let Some([(ol, tl), (on, tn)]) = ebt_check {
        let _ = writeln!(
            md,
            "\nEBT twin check (one batch, same weights and noise; PyTorch's dE/dz by autograd with create_graph): loss ours {ol:.6} PyTorch {tl:.6} (|diff| {:.1e}), gradient norm ours {on:.6} PyTorch {tn:.6} (|diff| {:.1e}).",
            (ol - tl).abs(),
            (on - tn).abs()
        );
    }
    let _ = writeln!(md, "\n**Decode** (`cargo run --release -p nrgpt-engine --example decode_bench`):\n");
    for l in decode.lines() {
        let _ = writeln!(md, "{l}");
    }
    if let Some(p) = &page {
        let _ = writeln!(md, "\n**Page** (headless Chromium, from `cargo xtask test-browser`: 100 characters, a long prompt, a 1 MB paste):\n");
        let shown = ["page-side:", "warmed run", "prompt: first character", "1 MB paste"];
        for l in p.lines().filter(|l| shown.iter().any(|k| l.contains(k))) {
            let _ = writeln!(md, "- {}", l.trim());
        }
    }
    let _ = writeln!(md, "\n**Energy** (fraction of tokens whose E_A(t) never rises after the transient, {} val windows):\n", plan.energy_windows);
    let _ = writeln!(md, "| model (S) | the trained T steps, judged from step 1 | 16 steps, judged from step 4 |");
    let _ = writeln!(md, "|---|---|---|");
    for r in &energy {
        let _ = writeln!(md, "| {} |", r.join(" | "));
    }
    println!("{md}");

    if smoke {
        check_smoke(&md, &quality)?;
        say(&format!("bench smoke passed in {:.0} s", t0.elapsed().as_secs_f64()));
        return Ok(());
    }
    write_figure(&quality, cmd_name)?;
    write_bench_md(&md)?;
    say(&format!("wrote {BENCH_MD} and the figure {FIGURE} ({:.0} min)", t0.elapsed().as_secs_f64() / 60.0));
    Ok(())
}

/// The smoke run must have produced every part of the table with sane numbers.
fn check_smoke(md: &str, quality: &[Quality]) -> Result<()> {
    for q in quality {
        for v in [q.val_f32, q.val_int8, q.train_f32] {
            if !(v.is_finite() && v > 0.5 && v < 5.0) {
                bail!("bench smoke: {} has an implausible loss {v}", q.name);
            }
        }
    }
    for part in ["**Quality**", "**Trainer throughput**", "**Decode**", "| 16 |", "dispatches", "**Energy**"] {
        if !md.contains(part) {
            bail!("bench smoke: the table lacks `{part}`");
        }
    }
    Ok(())
}

fn write_figure(quality: &[Quality], cmd_name: &str) -> Result<()> {
    let mut panels = Vec::new();
    for size in ["S", "M"] {
        let series = quality
            .iter()
            .filter(|q| q.size == size)
            .enumerate()
            .map(|(i, q)| {
                Ok(Series {
                    label: q.name.to_string(),
                    points: eval_points(&q.dir.join("log.csv"))?.into_iter().map(|(it, _, v)| (it, v)).collect(),
                    dashed: false,
                    colour: COLOURS[i % COLOURS.len()],
                })
            })
            .collect::<Result<_>>()?;
        let params = quality.iter().filter(|q| q.size == size).map(|q| q.params).max().unwrap_or(0);
        panels.push(Panel { title: format!("{size}: ~{:.2}M params, val loss", params as f64 / 1e6), x_label: ITER_AXIS.into(), series });
    }
    // the shipped default's log is optional: the figure has its panel when it is there
    let default_run = root().join(DEFAULT_RUN);
    let pts = if default_run.is_file() { eval_points(&default_run)? } else { Vec::new() };
    if !pts.is_empty() {
        panels.push(Panel {
            title: "shipped default (www/models/default-training.csv)".into(),
            x_label: ITER_AXIS.into(),
            series: vec![
                Series { label: "val".into(), points: pts.iter().map(|p| (p.0, p.2)).collect(), dashed: false, colour: COLOURS[0] },
                Series { label: "train".into(), points: pts.iter().map(|p| (p.0, p.1)).collect(), dashed: true, colour: COLOURS[1] },
            ],
        });
    }
    let caption =
        vec![format!("`{cmd_name}` on {} ({}); eval-point estimates from the training logs (runs/bench/*/log.csv, {DEFAULT_RUN})", machine(), today())];
    let path = root().join(FIGURE);
    std::fs::create_dir_all(path.parent().expect("figure has a folder"))?;
    crate::atomic::write_atomic(&path, crate::plot::svg(&panels, &caption).as_bytes())
}

const ITER_AXIS: &str = "iteration (loss in nats/char)";

/// BENCH.md's main part, rewritten; the sections other commands write
/// (`replace_bench_section`) are kept after it. Earlier numbers are in git.
fn write_bench_md(md: &str) -> Result<()> {
    let text = format!(
        "# Benchmarks\n\nWritten by `cargo xtask bench` (the full run takes about an hour on 2 cores; \
         `cargo xtask bench --smoke` is part of the test suite). History is in git.\n\n{md}\n![Loss curves]({FIGURE})\n"
    );
    // a missing BENCH.md has no sections to keep; an unreadable one must not lose them
    let old = match std::fs::read_to_string(root().join(BENCH_MD)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        r => r.with_context(|| format!("reading {BENCH_MD}"))?,
    };
    let kept: String = sections(&old).into_iter().map(|(_, block)| format!("\n{block}\n")).collect();
    crate::atomic::write_atomic(&root().join(BENCH_MD), (text + &kept).as_bytes())
}

fn section_marks(name: &str) -> (String, String) {
    (format!("<!-- section {name}: written by its own command, kept by `cargo xtask bench` -->"), format!("<!-- end of section {name} -->"))
}

/// The (name, whole block with its marks) of each marked section of `text`.
fn sections(text: &str) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("<!-- section ") {
        let after = &rest[i + "<!-- section ".len()..];
        let Some(name) = after.split(':').next().map(str::to_string) else { break };
        let end = section_marks(&name).1;
        let Some(j) = rest[i..].find(&end) else { break };
        out.push((name, &rest[i..i + j + end.len()]));
        rest = &rest[i + j + end.len()..];
    }
    out
}

/// Writes `md` as BENCH.md's section `name`, in place of the old one, or at the end.
pub(crate) fn replace_bench_section(name: &str, md: &str) -> Result<()> {
    let path = root().join(BENCH_MD);
    let old = std::fs::read_to_string(&path).with_context(|| format!("reading {BENCH_MD}"))?;
    let (begin, end) = section_marks(name);
    let block = format!("{begin}\n{}\n{end}", md.trim_end());
    let text = match sections(&old).into_iter().find(|(n, _)| n == name) {
        Some((_, was)) => old.replacen(was, &block, 1),
        None => format!("{}\n\n{block}\n", old.trim_end()),
    };
    crate::atomic::write_atomic(&path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marked_sections_are_found_whole_and_in_order() {
        let (b1, e1) = section_marks("science");
        let (b2, e2) = section_marks("listops");
        let text = format!("# Benchmarks\nmain\n{b1}\nrows\n{e1}\nbetween\n{b2}\nmore\n{e2}\n");
        let found = sections(&text);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0], ("science".to_string(), format!("{b1}\nrows\n{e1}").as_str()));
        assert_eq!(found[1].0, "listops");
        assert!(sections(&format!("{b1}\nno end")).is_empty(), "an unterminated section is not a section");
    }

    #[test]
    fn the_ratio_is_against_the_faster_pytorch_mode_that_ran() {
        let out = "params 10\neager_warmup_s 0.1\neager_tokens_per_s 1500.5\ncompiled_failed RuntimeError: no double backward\n";
        let (e, c) = (torch_speed(out, "eager").unwrap(), torch_speed(out, "compiled").unwrap());
        assert!(matches!(e, TorchSpeed::Tokens(v) if v == 1500.5));
        assert!(matches!(&c, TorchSpeed::Failed(why) if why == "RuntimeError: no double backward"));
        let row = |torch| Throughput { name: "m", ours: 3000.0, torch };
        assert_eq!(row(Some((e, c))).best_torch(), Some(1500.5));
        let both = (TorchSpeed::Tokens(900.0), TorchSpeed::Tokens(2000.0));
        assert_eq!(row(Some(both)).best_torch(), Some(2000.0), "compiled is faster here");
        assert_eq!(row(None).best_torch(), None);
        assert!(torch_speed("eager_tokens_per_s 1\n", "compiled").is_err(), "a missing mode is an error, not a zero");
    }
}
