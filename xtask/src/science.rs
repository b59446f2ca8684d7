//! `cargo xtask bench --science`: NRGPT against GPT at an equal token budget
//! (issue 18), as two studies over one pool of training runs:
//!
//! - **scaling**: every model family (with both recurrent baselines: ours,
//!   and the reference's `GPT_Rec_parallel`) at two sizes, the same iterations,
//!   batch, data order and seed, with the same learning-rate search per model
//!   at the small size; the large size starts from the lr each model chose
//!   there and steps past its grid's edge as well (last in the queue).
//! - **ablation**: NRGPT-FF2W at the small size with each of the reference's
//!   choices switched on alone, and all of them (`--preset reference`).
//! - **the paper's terms**: the small size trained twice as long with
//!   dropout 0.1 at the reference's lr, judged by the best-val checkpoint.
//!
//! Hours of training on 2 cores, so a run is never redone: each lives in
//! runs/science/<row>/lr<lr>/, a finished one is reused, one cut short is
//! resumed (`trainer train --resume`), and the report marks what is still to
//! run. `--report` writes the report from the runs that exist, training
//! nothing. The report replaces the science section of BENCH.md and draws two
//! figures (val loss against parameters; train and val curves per size).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::bench::{bin, eval_points, machine, replace_bench_section, run_finished, today, train_cmd, trainer_json};
use crate::plot::{Panel, Series, COLOURS};
use crate::{root, run, say};

/// One model at one size: a row of a study.
struct Row {
    /// Short name shown in the tables; also names the run folder.
    name: &'static str,
    size: &'static str,
    flags: &'static [&'static str],
}

struct Plan {
    iters: usize,
    common: &'static [&'static str],
    /// Learning rates searched per model at the small size (scaling).
    scaling_lrs: &'static [f64],
    /// How many times the search at the small size may step past the edge of
    /// `scaling_lrs` (x2 above, /2 below) while the best lr sits on it.
    lr_extensions: usize,
    /// The large size's lrs, as multiples of the lr its model chose at the
    /// small size: a wider model often wants a lower one.
    large_lr_factors: &'static [f64],
    /// The same stepping past the edge at the large size (10-70 minutes per
    /// run per core): after the paper's rows in the queue.
    large_lr_extensions: usize,
    /// Learning rates tried per ablation row.
    ablation_lrs: &'static [f64],
    small: Vec<Row>,
    large: Vec<Row>,
    ablation: Vec<Row>,
    /// The paper's terms: longer, with dropout, at the reference's lr, judged by the best-val checkpoint.
    paper: Vec<Row>,
    paper_iters: usize,
    paper_lr: f64,
    /// Where the runs live.
    base: &'static str,
    /// Characters of each split the whole-split evaluation reads (None: all).
    eval_chars: Option<usize>,
}

const FF2W_S: &[&str] = &["--model", "nrgpt-ff2w", "--d-model", "128", "--heads", "4", "--steps", "4"];
const FF2W_REF_STEP_S: &[&str] = &["--model", "nrgpt-ff2w", "--d-model", "128", "--heads", "4", "--steps", "4", "--eta", "free", "--eta-init", "normal"];

/// The EBT as it ships (issue 35: against GPT and the recurrent GPT at equal
/// parameters and tokens): System-2 preset, tied input, energy calibration.
const EBT_S: &[&str] =
    &["--model", "ebt", "--d-model", "64", "--heads", "4", "--layers", "4", "--preset", "ebt-s2", "--ebt-input", "tied", "--ebt-calibrate", "1"];
const EBT_M: &[&str] =
    &["--model", "ebt", "--d-model", "128", "--heads", "4", "--layers", "4", "--preset", "ebt-s2", "--ebt-input", "tied", "--ebt-calibrate", "1"];

fn full_plan() -> Plan {
    let s = |name, flags| Row { name, size: "S", flags };
    let m = |name, flags| Row { name, size: "M", flags };
    Plan {
        iters: 4000,
        common: &["--block", "64", "--batch", "32", "--eval-every", "250", "--eval-iters", "20", "--warmup", "100", "--seed", "1337"],
        scaling_lrs: &[3e-3, 1e-3, 6e-3],
        lr_extensions: 2,
        // the lower first: the stable ff2w at d = 256 sat on a plateau (val 2.38
        // at iteration 1,500) at the 6e-3 it chose at d = 128
        large_lr_factors: &[0.5, 1.0],
        // at M the stable and free ff2w both chose the lower of their two lrs,
        // and the 4-layer GPT's first step down (3e-3) beat its grid again
        large_lr_extensions: 2,
        ablation_lrs: &[3e-3, 1e-3],
        small: vec![
            s("nrgpt-ff2w", FF2W_S),
            s("nrgpt-ff2w, free eta N(0, 0.02)", FF2W_REF_STEP_S),
            s("nrgpt-ff1", &["--model", "nrgpt-ff1", "--d-model", "128", "--heads", "4", "--steps", "4", "--ff-mult", "8"]),
            s("gpt (4 layers)", &["--model", "gpt", "--d-model", "64", "--heads", "4", "--steps", "4"]),
            s("gpt-rec (1 layer x4)", &["--model", "gpt-rec", "--d-model", "120", "--heads", "4", "--steps", "4"]),
            s("gpt-rec parallel, ReLU (the reference's)", &["--model", "gpt-rec", "--d-model", "120", "--heads", "4", "--steps", "4", "--preset", "reference"]),
            s("ebt (4 layers, the shipped S2 recipe)", EBT_S),
        ],
        large: vec![
            m("nrgpt-ff2w", &["--model", "nrgpt-ff2w", "--d-model", "256", "--heads", "8", "--steps", "4", "--ff-mult", "5"]),
            m(
                "nrgpt-ff2w, free eta N(0, 0.02)",
                &["--model", "nrgpt-ff2w", "--d-model", "256", "--heads", "8", "--steps", "4", "--ff-mult", "4", "--eta", "free", "--eta-init", "normal"],
            ),
            m("nrgpt-ff1", &["--model", "nrgpt-ff1", "--d-model", "256", "--heads", "8", "--steps", "4", "--ff-mult", "10"]),
            m("gpt (4 layers)", &["--model", "gpt", "--d-model", "128", "--heads", "4", "--steps", "4"]),
            m("gpt-rec (1 layer x4)", &["--model", "gpt-rec", "--d-model", "256", "--heads", "8", "--steps", "4"]),
            m("gpt-rec parallel, ReLU (the reference's)", &["--model", "gpt-rec", "--d-model", "256", "--heads", "8", "--steps", "4", "--preset", "reference"]),
            m("ebt (4 layers, the shipped S2 recipe)", EBT_M),
        ],
        ablation: vec![
            s("nrgpt-ff2w", FF2W_S),
            s("nrgpt-ff2w, free eta N(0, 0.02)", FF2W_REF_STEP_S),
            s("free eta, identity init", &["--model", "nrgpt-ff2w", "--d-model", "128", "--heads", "4", "--steps", "4", "--eta", "free"]),
            s("beta = 1", &["--model", "nrgpt-ff2w", "--d-model", "128", "--heads", "4", "--steps", "4", "--attn-beta", "1"]),
            s("mask with the diagonal", &["--model", "nrgpt-ff2w", "--d-model", "128", "--heads", "4", "--steps", "4", "--attn-mask", "diagonal"]),
            s("bare block norm", &["--model", "nrgpt-ff2w", "--d-model", "128", "--heads", "4", "--steps", "4", "--block-norm", "bare"]),
            s(
                "full-rank J (head_dim 128, ff-mult 2)",
                &["--model", "nrgpt-ff2w", "--d-model", "128", "--heads", "4", "--steps", "4", "--head-dim", "128", "--ff-mult", "2"],
            ),
            s("reference preset (all of the above)", &["--model", "nrgpt-ff2w", "--d-model", "128", "--heads", "4", "--steps", "4", "--preset", "reference"]),
        ],
        paper: vec![
            s(
                "paper terms: nrgpt-ff2w, reference preset",
                &[
                    "--model",
                    "nrgpt-ff2w",
                    "--d-model",
                    "128",
                    "--heads",
                    "4",
                    "--steps",
                    "4",
                    "--preset",
                    "reference",
                    "--dropout",
                    "0.1",
                    "--attn-dropout",
                    "0.1",
                ],
            ),
            s(
                "paper terms: nrgpt-ff2w, free eta N(0, 0.02)",
                &[
                    "--model",
                    "nrgpt-ff2w",
                    "--d-model",
                    "128",
                    "--heads",
                    "4",
                    "--steps",
                    "4",
                    "--eta",
                    "free",
                    "--eta-init",
                    "normal",
                    "--dropout",
                    "0.1",
                    "--attn-dropout",
                    "0.1",
                ],
            ),
            s(
                "paper terms: nrgpt-ff1, reference preset",
                &[
                    "--model",
                    "nrgpt-ff1",
                    "--d-model",
                    "128",
                    "--heads",
                    "4",
                    "--steps",
                    "4",
                    "--ff-mult",
                    "8",
                    "--preset",
                    "reference",
                    "--dropout",
                    "0.1",
                    "--attn-dropout",
                    "0.1",
                ],
            ),
            s(
                "paper terms: gpt (4 layers)",
                &["--model", "gpt", "--d-model", "64", "--heads", "4", "--steps", "4", "--dropout", "0.1", "--attn-dropout", "0.1"],
            ),
            s(
                "paper terms: gpt-rec (ours)",
                &["--model", "gpt-rec", "--d-model", "120", "--heads", "4", "--steps", "4", "--dropout", "0.1", "--attn-dropout", "0.1"],
            ),
            s(
                "paper terms: gpt-rec parallel (the reference's)",
                &[
                    "--model",
                    "gpt-rec",
                    "--d-model",
                    "120",
                    "--heads",
                    "4",
                    "--steps",
                    "4",
                    "--preset",
                    "reference",
                    "--dropout",
                    "0.1",
                    "--attn-dropout",
                    "0.1",
                ],
            ),
        ],
        paper_iters: 8000,
        paper_lr: 1e-3,
        base: "runs/science",
        eval_chars: None,
    }
}

/// Seconds, not hours: tiny models, a few iterations, two sizes, two lrs.
fn smoke_plan() -> Plan {
    let tiny = |name, size, flags| Row { name, size, flags };
    Plan {
        iters: 8,
        common: &["--block", "16", "--batch", "4", "--eval-every", "4", "--eval-iters", "2"],
        scaling_lrs: &[3e-3, 1e-2],
        lr_extensions: 1,
        large_lr_factors: &[0.5, 1.0],
        large_lr_extensions: 1,
        ablation_lrs: &[3e-3],
        small: vec![
            tiny("nrgpt-ff2w", "S", &["--model", "nrgpt-ff2w", "--d-model", "16", "--heads", "2", "--steps", "2"]),
            tiny("gpt (2 layers)", "S", &["--model", "gpt", "--d-model", "16", "--heads", "2", "--steps", "2"]),
        ],
        large: vec![
            tiny("nrgpt-ff2w", "M", &["--model", "nrgpt-ff2w", "--d-model", "24", "--heads", "2", "--steps", "2"]),
            tiny("gpt (2 layers)", "M", &["--model", "gpt", "--d-model", "24", "--heads", "2", "--steps", "2"]),
        ],
        ablation: vec![
            tiny("nrgpt-ff2w", "S", &["--model", "nrgpt-ff2w", "--d-model", "16", "--heads", "2", "--steps", "2"]),
            tiny("reference preset", "S", &["--model", "nrgpt-ff2w", "--d-model", "16", "--heads", "2", "--steps", "2", "--preset", "reference"]),
        ],
        paper: vec![tiny(
            "paper terms: nrgpt-ff2w",
            "S",
            &["--model", "nrgpt-ff2w", "--d-model", "16", "--heads", "2", "--steps", "2", "--dropout", "0.1", "--attn-dropout", "0.1"],
        )],
        paper_iters: 12,
        paper_lr: 1e-3,
        base: "target/science-smoke",
        eval_chars: Some(2000),
    }
}

fn slug(row: &Row) -> String {
    let s: String = row.name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    format!("{}-{}", row.size.to_lowercase(), s.split('-').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-"))
}

/// The whole-split numbers of one finished run, cached beside it.
#[derive(Serialize, Deserialize, Clone)]
struct Evals {
    params: usize,
    /// Whole val split, the final weights.
    val: f64,
    /// Whole val split, best.safetensors (the lowest val estimate's weights).
    best_val: f64,
    /// The train split's first characters (as many as the val split has), final weights.
    train: f64,
    tokens_per_s: f64,
    /// (iteration, train estimate, val estimate) at each evaluation: the
    /// curve, kept here so the report needs neither the log nor the
    /// checkpoints (this file is what git keeps of a run).
    #[serde(default)]
    points: Vec<(f64, f64, f64)>,
    /// NRGPT: the share of val tokens whose energy never rises after the
    /// first step (`trainer energy`): what the free step gives up.
    #[serde(default)]
    descent: Option<f64>,
}

/// Windows `trainer energy` reads for the descent column.
const DESCENT_WINDOWS: &str = "32";

impl Row {
    fn is_nrgpt(&self) -> bool {
        self.flags.windows(2).any(|w| w[0] == "--model" && w[1].starts_with("nrgpt"))
    }
}

/// One run of the pool: a row at one learning rate.
struct Run {
    dir: PathBuf,
    lr: f64,
    evals: Option<Evals>,
}

fn run_dir(plan: &Plan, row: &Row, lr: f64) -> PathBuf {
    root().join(plan.base).join(slug(row)).join(format!("lr{lr:e}"))
}

/// Trains (or resumes, or reuses) one run of `iters` iterations and evaluates it on the whole splits.
fn train_run(trainer: &str, plan: &Plan, row: &Row, lr: f64, iters: usize, train: bool) -> Result<Run> {
    let dir = run_dir(plan, row, lr);
    let ckpt = dir.join("ckpt.safetensors");
    let cache = dir.join("science-evals.json");
    // written once the run finished and was evaluated; newer than the
    // checkpoint, or alone (git keeps this file of a run, not its checkpoints)
    let fresh = |c: &Path| -> bool {
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        modified(c).is_some_and(|a| modified(&ckpt).is_none_or(|b| a >= b))
    };
    if !run_finished(&dir, iters) && (!fresh(&cache) || ckpt.is_file()) {
        if !train {
            return Ok(Run { dir, lr, evals: None });
        }
        let lr_text = format!("{lr:e}");
        let flags: Vec<&str> = row.flags.iter().chain(plan.common).copied().chain(["--lr", lr_text.as_str()]).collect();
        // a run another `bench --science` trains is left to it, so two of
        // them (one per core) share the queue
        if held_elsewhere(&dir) {
            say(&format!("{} {} at lr {lr:e}: another process is training it; moving on", row.size, row.name));
            return Ok(Run { dir, lr, evals: None });
        }
        let (mut cmd, resume) = train_cmd(trainer, &dir, iters, &flags);
        say(&format!("{} {} at lr {lr:e}: {iters} iterations into {}{}", row.size, row.name, dir.display(), if resume { " (resuming)" } else { "" }));
        // a diverged run is a result (the lr is too high), not a reason to stop the study
        if let Err(e) = trainer_json(&mut cmd) {
            eprintln!("    this run stopped: {e:#}");
            return Ok(Run { dir, lr, evals: None });
        }
    }
    let descent = || -> Result<Option<f64>> {
        if !row.is_nrgpt() {
            return Ok(None);
        }
        let mut cmd = Command::new(trainer);
        cmd.arg("energy").arg("--ckpt").arg(&ckpt).args(["--skip", "1", "--windows", DESCENT_WINDOWS]);
        Ok(Some(trainer_json(&mut cmd)?.f64("monotone_fraction")?))
    };
    if fresh(&cache) {
        if let Ok(mut e) = serde_json::from_str::<Evals>(&std::fs::read_to_string(&cache)?) {
            // caches from before the descent column get it while their checkpoint is here
            if e.descent.is_none() && row.is_nrgpt() && ckpt.is_file() {
                e.descent = descent()?;
                crate::atomic::write_atomic(&cache, serde_json::to_string_pretty(&e)?.as_bytes())?;
            }
            return Ok(Run { dir, lr, evals: Some(e) });
        }
    }
    let eval = |file: &Path, split: &str| -> Result<f64> {
        let mut cmd = Command::new(trainer);
        cmd.arg("eval").arg("--ckpt").arg(file).args(["--split", split]);
        if let Some(m) = plan.eval_chars.or((split == "train").then_some(111_540)) {
            cmd.args(["--max-chars", &m.to_string()]);
        }
        trainer_json(&mut cmd)?.f64("loss")
    };
    let export =
        trainer_json(Command::new(trainer).arg("export").arg("--ckpt").arg(&ckpt).arg("--out").arg(dir.join("int8.safetensors")).args(["--quant", "int8"]))?;
    let evals = Evals {
        params: export.usize("params")?,
        val: eval(&ckpt, "val")?,
        best_val: eval(&dir.join("best.safetensors"), "val")?,
        train: eval(&ckpt, "train")?,
        tokens_per_s: mean_tokens_per_s(&dir.join("log.csv"))?,
        points: eval_points(&dir.join("log.csv"))?,
        descent: descent()?,
    };
    crate::atomic::write_atomic(&cache, serde_json::to_string_pretty(&evals)?.as_bytes())?;
    Ok(Run { dir, lr, evals: Some(evals) })
}

/// Whether another process holds the run's lock (the trainer's OS file lock) right now.
fn held_elsewhere(dir: &Path) -> bool {
    let Ok(file) = std::fs::File::open(dir.join("lock")) else { return false };
    matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock))
}

/// The training speed the log's last training row reports (a running mean over the run's last sitting).
fn mean_tokens_per_s(log: &Path) -> Result<f64> {
    let text = std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    Ok(text.lines().rev().find_map(|l| l.split(',').nth(6)?.parse().ok()).unwrap_or(0.0))
}

/// How a val curve ends: turned up, flat, or still falling, judged on its
/// estimates (20 batches each, so differences under 0.01 are noise).
fn curve_shape(points: &[(f64, f64, f64)]) -> String {
    let val: Vec<(f64, f64)> = points.iter().map(|p| (p.0, p.2)).collect();
    let Some(&(last_it, last)) = val.last() else { return "no evaluations".into() };
    let (best_it, best) = val.iter().copied().fold((0.0, f64::INFINITY), |b, p| if p.1 < b.1 { p } else { b });
    if last - best > 0.01 {
        return format!("turned up (best at {best_it:.0}, +{:.3} by {last_it:.0})", last - best);
    }
    let quarter = |lo: f64, hi: f64| val.iter().filter(|p| p.0 > lo * last_it && p.0 <= hi * last_it).map(|p| p.1).fold(f64::INFINITY, f64::min);
    let drop = quarter(0.5, 0.75) - quarter(0.75, 1.0);
    if !drop.is_finite() {
        return "too few evaluations to tell".into();
    }
    if drop < 0.01 {
        format!("flat (last quarter -{:.3})", drop.max(0.0))
    } else {
        format!("still falling (last quarter -{drop:.3})")
    }
}

/// The run with the lowest whole-split val among those finished.
fn best_run(runs: &[Run]) -> Option<&Run> {
    runs.iter().filter(|r| r.evals.is_some()).min_by(|a, b| {
        let v = |r: &Run| r.evals.as_ref().map_or(f64::INFINITY, |e| e.best_val);
        v(a).total_cmp(&v(b))
    })
}

/// Once every run has finished: the lr beyond the grid's edge when the best
/// one sits on it (twice the largest, half the smallest), else None.
fn next_lr(runs: &[Run]) -> Option<f64> {
    if runs.iter().any(|r| r.evals.is_none()) {
        return None;
    }
    let best = best_run(runs)?.lr;
    let (lo, hi) = runs.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), r| (lo.min(r.lr), hi.max(r.lr)));
    if runs.len() < 2 {
        None
    } else if best == hi {
        Some(hi * 2.0)
    } else if best == lo {
        Some(lo / 2.0)
    } else {
        None
    }
}

/// A best lr on the edge of the grid is no optimum: step past it, at most `times` times.
fn step_past_edge(runs: &mut Vec<Run>, times: usize, mut train: impl FnMut(f64) -> Result<Run>) -> Result<()> {
    for _ in 0..times {
        let Some(lr) = next_lr(runs) else { break };
        runs.push(train(lr)?);
    }
    Ok(())
}

fn lrs_tried(runs: &[Run]) -> String {
    let done = runs.iter().filter(|r| r.evals.is_some()).count();
    let all: Vec<String> = runs.iter().map(|r| format!("{:e}{}", r.lr, if r.evals.is_some() { "" } else { " (pending)" })).collect();
    format!("{done} of {}: {}", runs.len(), all.join(", "))
}

/// One table line for a row: its best run at the lrs tried.
fn row_line(md: &mut String, row: &Row, runs: &[Run], iters: usize, tokens_per_iter: usize, reference: Option<f64>) {
    let Some(best) = best_run(runs) else {
        // a large-size row has no run until its model's lr search at the small size is done
        let tried = if runs.is_empty() { "after the lr search at S".to_string() } else { lrs_tried(runs) };
        let _ = writeln!(md, "| {} | {} | - | {} | pending | | | | | | | | {tried} |", row.size, row.name, iters * tokens_per_iter);
        return;
    };
    let e = best.evals.as_ref().expect("best_run keeps finished runs");
    let shape = curve_shape(&e.points);
    let delta = reference.map_or(String::new(), |r| format!(" ({:+.4})", e.best_val - r));
    let descent = e.descent.map_or_else(|| if row.is_nrgpt() { "not measured".into() } else { "-".into() }, |f| format!("{f:.3}"));
    let _ = writeln!(
        md,
        "| {} | {} | {} | {} | {:e} | {:.4}{delta} | {:.4} | {:.4} | {:+.4} | {descent} | {:.0} | {shape} | {} |",
        row.size,
        row.name,
        e.params,
        iters * tokens_per_iter,
        best.lr,
        e.best_val,
        e.val,
        e.train,
        e.val - e.train,
        e.tokens_per_s,
        lrs_tried(runs)
    );
}

const HEADER: &str = "| size | model | params | tokens | lr chosen | best val | final val | train | gap (final val - train) | energy falls | tokens/s | val curve | lrs tried |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|";

fn tokens_per_iter(plan: &Plan) -> usize {
    let flag = |name: &str| plan.common.iter().position(|f| *f == name).and_then(|i| plan.common.get(i + 1)?.parse::<usize>().ok()).unwrap_or(0);
    flag("--block") * flag("--batch")
}

/// `cargo xtask bench --science [--report] [--smoke]`.
pub fn science(smoke: bool, report_only: bool) -> Result<()> {
    let plan = if smoke { smoke_plan() } else { full_plan() };
    if smoke {
        let _ = std::fs::remove_dir_all(root().join(plan.base));
        run(Command::new("cargo").args(["test", "--workspace", "--no-run"]))?;
    } else if !report_only {
        run(Command::new("cargo").args(["build", "--release", "-p", "trainer", "--bin", "trainer"]))?;
    }
    let trainer = bin(smoke, "trainer");
    let train = !report_only;

    // Small size first, every model at the first lr, so a short sitting
    // already compares all families; then the other lrs; then the ablation
    // rows (about two hours on two cores, and they say which of the reference's
    // choices the retrained default should take); then the large size at each
    // model's chosen lr (an hour per run per core); then the paper's terms;
    // last, the large size's steps past the edge of its lr grid.
    let mut small: Vec<Vec<Run>> = plan.small.iter().map(|_| Vec::new()).collect();
    for &lr in plan.scaling_lrs {
        for (i, row) in plan.small.iter().enumerate() {
            small[i].push(train_run(&trainer, &plan, row, lr, plan.iters, train)?);
        }
    }
    for (row, runs) in plan.small.iter().zip(&mut small) {
        step_past_edge(runs, plan.lr_extensions, |lr| train_run(&trainer, &plan, row, lr, plan.iters, train))?;
    }
    let mut ablation = Vec::new();
    for row in &plan.ablation {
        let mut runs = Vec::new();
        for &lr in plan.ablation_lrs {
            runs.push(train_run(&trainer, &plan, row, lr, plan.iters, train)?);
        }
        ablation.push(runs);
    }
    let mut large = Vec::new();
    for (i, row) in plan.large.iter().enumerate() {
        let small_row = plan.small.iter().position(|s| s.name == row.name).unwrap_or(i);
        let lr = best_run(&small[small_row]).map(|r| r.lr);
        let runs = match lr {
            Some(lr) if small[small_row].iter().all(|r| r.evals.is_some()) => {
                plan.large_lr_factors.iter().map(|f| train_run(&trainer, &plan, row, lr * f, plan.iters, train)).collect::<Result<Vec<_>>>()?
            }
            // the search at the small size must finish first
            _ => Vec::new(),
        };
        large.push(runs);
    }
    let mut paper = Vec::new();
    for row in &plan.paper {
        paper.push(vec![train_run(&trainer, &plan, row, plan.paper_lr, plan.paper_iters, train)?]);
    }
    for (row, runs) in plan.large.iter().zip(&mut large) {
        step_past_edge(runs, plan.large_lr_extensions, |lr| train_run(&trainer, &plan, row, lr, plan.iters, train))?;
    }

    let md = report(&plan, &small, &large, &ablation, &paper, smoke);
    println!("{md}");
    if smoke {
        return check_smoke(&md, &small, &large, plan.large_lr_factors.len(), plan.large_lr_extensions);
    }
    write_figures(&plan, &small, &large)?;
    replace_bench_section("science", &md)?;
    say("wrote the science section of BENCH.md and its figures");
    Ok(())
}

fn report(plan: &Plan, small: &[Vec<Run>], large: &[Vec<Run>], ablation: &[Vec<Run>], paper: &[Vec<Run>], smoke: bool) -> String {
    let tpi = tokens_per_iter(plan);
    let cmd = if smoke { "cargo xtask bench --science --smoke" } else { "cargo xtask bench --science" };
    let mut md = String::new();
    let _ = writeln!(md, "## NRGPT against GPT at an equal budget (issue 18)\n");
    let _ = writeln!(
        md,
        "Measured by `{cmd}` on {} ({}). Every run: {} iterations of {} ({} tokens), cosine lr to lr/10, weight decay 0.1, no dropout, the same data order and seed; \
         lr searched over {:?} at size S per model (then x2 or /2 past the grid's edge, up to {} times, while the best lr sits on it), size M at the lr its model chose at S times {:?} (then past the edge as at S, up to {} times). \
         Val and train are whole-split evaluations (train: its first 111,540 characters, as many as val has); \
         best val is best.safetensors, the weights at the lowest val estimate. Runs live in {}/ and are reused; \
         two `RAYON_NUM_THREADS=1 cargo xtask bench --science` at once (one per core) share the queue, each leaving the run the other trains; \
         `cargo xtask bench --science --report` rewrites this section from them. \
         tokens/s is each run's own training speed, on whatever else the machine ran meanwhile: \
         the throughput table above is the clean speed comparison. \
         Energy falls (NRGPT): the share of val tokens ({DESCENT_WINDOWS} windows) whose energy E_A(t) never rises after the first step, from `trainer energy`; \
         the stable step guarantees a fall only for a fixed context, and all tokens descend together, so even it can show rises.\n",
        machine(),
        today(),
        plan.iters,
        plan.common.join(" "),
        plan.iters * tpi,
        plan.scaling_lrs,
        plan.lr_extensions,
        plan.large_lr_factors,
        plan.large_lr_extensions,
        plan.base
    );
    let _ = writeln!(md, "**Equal budget**\n\n{HEADER}");
    for (row, runs) in plan.small.iter().zip(small).chain(plan.large.iter().zip(large)) {
        row_line(&mut md, row, runs, plan.iters, tpi, None);
    }
    let ours = plan.ablation.first().and_then(|_| best_run(&ablation[0])).and_then(|r| r.evals.as_ref()).map(|e| e.best_val);
    let _ = writeln!(
        md,
        "\n**Ablation** (NRGPT-FF2W at size S, each of the reference's choices alone, then all; lrs {:?}; in brackets: against the first row)\n\n{HEADER}",
        plan.ablation_lrs
    );
    for (i, (row, runs)) in plan.ablation.iter().zip(ablation).enumerate() {
        row_line(&mut md, row, runs, plan.iters, tpi, if i == 0 { None } else { ours });
    }
    let _ = writeln!(
        md,
        "\n**On the paper's terms** (size S, {} iterations ({} tokens), lr {:e} (the reference's), dropout 0.1 on the residual branches and on the attention probabilities; best val = the best-validation checkpoint, as the paper reports; \
         the paper trains 40,000 iterations of 64 x 256 tokens, {:.0}x this budget)\n\n{HEADER}",
        plan.paper_iters,
        plan.paper_iters * tpi,
        plan.paper_lr,
        (40_000.0 * 64.0 * 256.0) / (plan.paper_iters * tpi) as f64
    );
    for (row, runs) in plan.paper.iter().zip(paper) {
        row_line(&mut md, row, runs, plan.paper_iters, tpi, None);
    }
    let _ = writeln!(md, "\n![Val loss against parameters]({FIG_PARAMS})\n\n![Train and val curves]({FIG_CURVES})");
    md
}

const FIG_PARAMS: &str = "www/figures/science-val-vs-params.svg";
const FIG_CURVES: &str = "www/figures/science-curves.svg";

fn write_figures(plan: &Plan, small: &[Vec<Run>], large: &[Vec<Run>]) -> Result<()> {
    let caption = vec![format!("`cargo xtask bench --science` on {} ({}); {} iterations per run", machine(), today(), plan.iters)];
    // val against params: one line per model through its sizes
    let mut by_params = Vec::new();
    for (i, row) in plan.small.iter().enumerate() {
        let mut points = Vec::new();
        for runs in [Some(&small[i]), plan.large.iter().position(|l| l.name == row.name).map(|j| &large[j])].into_iter().flatten() {
            if let Some(e) = best_run(runs).and_then(|r| r.evals.as_ref()) {
                points.push((e.params as f64, e.best_val));
            }
        }
        by_params.push(Series { label: row.name.to_string(), points, dashed: false, colour: COLOURS[i % COLOURS.len()] });
    }
    let params_panel = Panel { title: "best val against parameters".into(), x_label: "parameters (loss in nats/char)".into(), series: by_params };
    write_svg(FIG_PARAMS, &[params_panel], &caption)?;
    // train (dashed) and val curves of each model's chosen run, one panel per size
    let mut panels = Vec::new();
    for (size, rows, runs) in [("S", &plan.small, small), ("M", &plan.large, large)] {
        let mut series = Vec::new();
        for (i, (row, r)) in rows.iter().zip(runs).enumerate() {
            let Some(pts) = best_run(r).and_then(|b| b.evals.as_ref()).map(|e| &e.points) else { continue };
            let colour = COLOURS[i % COLOURS.len()];
            series.push(Series { label: row.name.to_string(), points: pts.iter().map(|p| (p.0, p.2)).collect(), dashed: false, colour });
            series.push(Series { label: String::new(), points: pts.iter().map(|p| (p.0, p.1)).collect(), dashed: true, colour });
        }
        panels.push(Panel { title: format!("{size}: val (solid) and train (dashed) estimates"), x_label: "iteration (loss in nats/char)".into(), series });
    }
    write_svg(FIG_CURVES, &panels, &caption)
}

fn write_svg(path: &str, panels: &[Panel], caption: &[String]) -> Result<()> {
    let full = root().join(path);
    std::fs::create_dir_all(full.parent().expect("figures have a folder"))?;
    crate::atomic::write_atomic(&full, crate::plot::svg(panels, caption).as_bytes())
}

/// The smoke run must train, evaluate, choose an lr and report every row.
fn check_smoke(md: &str, small: &[Vec<Run>], large: &[Vec<Run>], large_grid: usize, large_steps: usize) -> Result<()> {
    // every size-M row tries its whole grid, then stops stepping past its edge
    // only when its best lr is inside or the steps are used up
    let max = large_grid + large_steps;
    anyhow::ensure!(
        large.iter().all(|runs| runs.len() >= large_grid && (runs.len() == max || (runs.len() < max && next_lr(runs).is_none()))),
        "science smoke: a size-M row did not try its {large_grid} lrs, or stopped stepping past the edge early (at most {max} lrs):\n{md}"
    );
    for runs in small {
        for r in runs {
            let e = r.evals.as_ref().with_context(|| format!("science smoke: {} did not finish", r.dir.display()))?;
            for v in [e.val, e.best_val, e.train] {
                anyhow::ensure!(v.is_finite() && v > 0.5 && v < 5.0, "science smoke: {} has an implausible loss {v}", r.dir.display());
            }
            let nrgpt = r.dir.to_string_lossy().contains("nrgpt");
            anyhow::ensure!(e.descent.is_some() == nrgpt, "science smoke: {} has descent {:?}", r.dir.display(), e.descent);
            anyhow::ensure!(e.descent.is_none_or(|f| (0.0..=1.0).contains(&f)), "science smoke: {} has descent {:?}", r.dir.display(), e.descent);
        }
    }
    anyhow::ensure!(!md.contains("pending"), "science smoke: rows still pending:\n{md}");
    anyhow::ensure!(md.contains("**Ablation**") && md.contains("| M |") && md.contains("**On the paper's terms**"), "science smoke: a table is missing:\n{md}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(vals: &[f64]) -> Vec<(f64, f64, f64)> {
        vals.iter().enumerate().map(|(i, &v)| (i as f64 * 250.0, v + 0.1, v)).collect()
    }

    #[test]
    fn a_curve_is_called_what_it_does() {
        assert!(curve_shape(&curve(&[3.0, 2.0, 1.9, 1.85, 1.84, 1.9, 1.95])).starts_with("turned up (best at 1000"));
        assert!(curve_shape(&curve(&[3.0, 2.5, 2.0, 1.9, 1.85, 1.849, 1.848, 1.847, 1.846])).starts_with("flat"));
        assert!(curve_shape(&curve(&[3.0, 2.8, 2.6, 2.4, 2.2, 2.0, 1.8, 1.6, 1.4])).starts_with("still falling"));
        assert_eq!(curve_shape(&curve(&[3.0, 2.8, 2.6])), "too few evaluations to tell");
    }

    /// A run at `lr` with best val `v`, or not finished (None).
    fn run(lr: f64, v: Option<f64>) -> Run {
        Run {
            dir: PathBuf::new(),
            lr,
            evals: v.map(|v| Evals { params: 1, val: v + 0.01, best_val: v, train: v - 0.1, tokens_per_s: 1.0, points: Vec::new(), descent: None }),
        }
    }

    #[test]
    fn the_chosen_lr_is_the_finished_run_with_the_lowest_best_val() {
        let runs = [run(1e-3, Some(1.9)), run(3e-3, Some(1.8)), run(6e-3, None)];
        assert_eq!(best_run(&runs).map(|r| r.lr), Some(3e-3));
        assert_eq!(lrs_tried(&runs), "2 of 3: 1e-3, 3e-3, 6e-3 (pending)");
        assert!(best_run(&[run(1e-3, None)]).is_none());
    }

    #[test]
    fn the_lr_search_steps_past_an_edge_only_when_the_best_sits_on_it() {
        assert_eq!(next_lr(&[run(3e-3, Some(1.8)), run(1e-3, Some(1.9)), run(6e-3, Some(1.7))]), Some(1.2e-2));
        assert_eq!(next_lr(&[run(3e-3, Some(1.8)), run(1e-3, Some(1.7)), run(6e-3, Some(1.9))]), Some(5e-4));
        assert_eq!(next_lr(&[run(3e-3, Some(1.7)), run(1e-3, Some(1.8)), run(6e-3, Some(1.9))]), None);
        // not before the grid has finished, nor from a single run
        assert_eq!(next_lr(&[run(3e-3, Some(1.8)), run(6e-3, None)]), None);
        assert_eq!(next_lr(&[run(3e-3, Some(1.8))]), None);
    }

    #[test]
    fn stepping_past_the_edge_stops_inside_the_grid_or_when_the_steps_are_used() {
        // val falls towards lr 2.5e-4 and rises below it
        let train = |lr: f64| -> Result<Run> { Ok(run(lr, Some(1.6 + (lr.log2() - 2.5e-4f64.log2()).abs() * 0.01))) };
        let grid = || vec![train(1e-3).unwrap(), train(2e-3).unwrap()];
        let mut runs = grid();
        step_past_edge(&mut runs, 1, train).unwrap();
        assert_eq!(runs.iter().map(|r| r.lr).collect::<Vec<_>>(), [1e-3, 2e-3, 5e-4], "one step allowed");
        let mut runs = grid();
        step_past_edge(&mut runs, 5, train).unwrap();
        // 2.5e-4 wins once 1.25e-4 has shown the turn
        assert_eq!(runs.iter().map(|r| r.lr).collect::<Vec<_>>(), [1e-3, 2e-3, 5e-4, 2.5e-4, 1.25e-4]);
        assert_eq!(best_run(&runs).map(|r| r.lr), Some(2.5e-4));
    }

    #[test]
    fn a_run_whose_lock_is_held_is_left_to_its_holder() {
        let dir = std::env::temp_dir().join(format!("science-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(!held_elsewhere(&dir), "no lock file yet");
        let holder = std::fs::File::create(dir.join("lock")).unwrap();
        assert!(!held_elsewhere(&dir), "a lock file that no process holds (its trainer was killed)");
        holder.lock().unwrap();
        assert!(held_elsewhere(&dir));
        drop(holder);
        assert!(!held_elsewhere(&dir), "the lock goes with its holder");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_row_has_its_own_run_folder() {
        let plan = full_plan();
        let mut seen = std::collections::HashMap::new();
        for row in plan.small.iter().chain(&plan.large).chain(&plan.ablation).chain(&plan.paper) {
            // a name shared between studies must mean the same run
            if let Some(flags) = seen.insert(slug(row), row.flags) {
                assert_eq!(flags, row.flags, "{} names two different models", slug(row));
            }
        }
        assert_eq!(tokens_per_iter(&plan), 2048);
    }
}
