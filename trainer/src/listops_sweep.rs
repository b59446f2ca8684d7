//! `trainer listops-sweep`: test accuracy against parameter count for
//! NRGPT-FF1, NRGPT-FF2W and the recurrent GPT on ListOps, and where each
//! crosses 80% (the paper's "learning transition").

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use nrgpt_core::model::num_params;
use nrgpt_core::{Activation, Arch, BlockNorm, EtaInit, EtaKind, GptBlock, ModelConfig};
use serde::{Deserialize, Serialize};

use crate::fast::TrainBackend;
use crate::listops_data::{generate, majority_baseline, DataSpec, ListOpsData};
use crate::files::write_atomic;
use crate::listops_score::accuracy;
use crate::resume::Requested;
use crate::run_log;
use crate::train::{run, RunPaths, Start, TrainSettings};

/// Accuracy that counts as having learned the task (the paper's threshold).
pub const LEARNED: f64 = 0.8;

/// The paper's transition points (parameters), as issue 19 quotes them.
pub fn paper_transition(arch: Arch) -> Option<f64> {
    match arch {
        Arch::GptRec => Some(2.3e4),
        Arch::NrgptFf1 => Some(2.4e4),
        Arch::NrgptFf2w => Some(3.0e4),
        _ => None,
    }
}

/// One sweep: every model at every width, trained alike.
#[derive(Debug, Clone)]
pub struct SweepSpec {
    pub models: Vec<Arch>,
    pub widths: Vec<usize>,
    /// Recursion steps T (the reference's `n_layer` 5).
    pub steps: usize,
    /// NRGPT with the reference's choices (else ours: stable eta, learned norm gain, beta 1/sqrt(d)).
    pub reference_nrgpt: bool,
    /// The recurrent GPT's block (the reference's: parallel).
    pub gpt_block: GptBlock,
    pub block: usize,
    pub batch: usize,
    pub iters: usize,
    pub lr: f64,
    pub data: DataSpec,
    /// Test expressions scored per model (the first of the test set).
    pub scored: usize,
    pub seed: u64,
}

/// The model a sweep trains: one head, T steps, the reference's LOPS00
/// choices (NRGPT_H, if `reference_nrgpt`: one full-rank D x D matrix per
/// head, beta 1, free eta from N(0, 0.02), the bare block norm;
/// GPT_Rec_parallel: ReLU and, with `GptBlock::Parallel`, its block), with
/// the strict causal mask its ListOps runs use.
pub fn listops_config(arch: Arch, vocab: usize, d: usize, steps: usize, block: usize, reference_nrgpt: bool, gpt_block: GptBlock) -> ModelConfig {
    let mut c = ModelConfig::new(arch, vocab, d, 1, steps, block);
    if arch.is_nrgpt() && reference_nrgpt {
        c.head_dim = d;
        c.eta = EtaKind::Free;
        c.eta_init = EtaInit::Normal;
        c.attn_beta = Some(1.0);
        c.block_norm = BlockNorm::Bare;
    } else if !arch.is_nrgpt() {
        c.activation = Activation::Relu;
        c.gpt_block = gpt_block;
    }
    c
}

/// One trained model's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    pub model: String,
    pub d_model: usize,
    pub params: usize,
    pub val_loss: f64,
    pub accuracy: f64,
    /// Training and scoring time, summed over the processes that worked on it.
    pub seconds: f64,
    pub ckpt: PathBuf,
}

/// A finished model's result, kept in its run folder so a rerun of the
/// sweep (after a kill, or to add widths) does not train it again.
#[derive(Serialize, Deserialize)]
struct Finished {
    config: ModelConfig,
    settings: TrainSettings,
    point: Point,
}

const FINISHED: &str = "point.json";

/// Where one model crossed [`LEARNED`].
#[derive(Debug, Clone, Serialize)]
pub struct Transition {
    pub model: String,
    /// The smallest model at or above the threshold with every larger one too (None: never).
    pub first_learned: Option<usize>,
    /// The crossing, interpolated in log(params) between the last model below and the next above.
    pub interpolated: Option<f64>,
    pub paper: Option<f64>,
}

impl SweepSpec {
    pub fn settings(&self) -> TrainSettings {
        TrainSettings {
            batch: self.batch,
            iters: self.iters,
            lr: self.lr,
            min_lr: self.lr / 10.0,
            warmup: (self.iters / 20).min(200),
            weight_decay: 0.1,
            dropout: 0.0,
            attn_dropout: 0.0,
            grad_clip: 1.0,
            // each evaluation saves a checkpoint that a killed sweep resumes from
            eval_every: self.iters.min(1000),
            eval_iters: 10,
            seed: self.seed,
            ebt: Default::default(),
        }
    }

    /// Trains and scores every model; `out` gets one run folder per model.
    /// Returns the points and the scored expressions' majority baseline (chance).
    pub fn run(&self, out: &Path, log: &mut dyn FnMut(&Point)) -> Result<(Vec<Point>, f64)> {
        let data = generate(&self.data)?;
        let chance = majority_baseline(&data.test[..self.scored.min(data.test.len())]);
        let mut points = Vec::new();
        for &arch in &self.models {
            for &d in &self.widths {
                let p = self.train_one(&data, arch, d, &out.join(format!("{}-d{d}", arch.name())))?;
                log(&p);
                points.push(p);
            }
        }
        Ok((points, chance))
    }

    /// Trains one model on `data` into `dir` and scores it on the test set.
    /// A finished model of the same config and settings is read back; a
    /// killed one resumes from its last checkpoint; any other run in `dir`
    /// is refused rather than overwritten.
    pub fn train_one(&self, data: &ListOpsData, arch: Arch, d: usize, dir: &Path) -> Result<Point> {
        let cfg = listops_config(arch, data.vocab.len(), d, self.steps, self.block, self.reference_nrgpt, self.gpt_block);
        let settings = self.settings();
        let paths = RunPaths { dir: dir.to_path_buf() };
        if let Some(done) = read_finished(dir)? {
            if same_run(&done.config, &done.settings, &cfg, &settings)? {
                return Ok(done.point);
            }
            bail!("{} holds a finished run with other settings than this sweep's; remove it or pick another --out", dir.display());
        }
        let (start, seconds_before) = match paths.stored()? {
            None => (Start::Fresh { cfg: cfg.clone(), settings: settings.clone(), overwrite: false }, 0.0),
            Some((stored, state)) if same_run(&stored.config, &state.settings, &cfg, &settings)? => {
                (Start::Resume { iters: None, requested: Requested { cfg: cfg.clone(), settings: settings.clone(), given: Vec::new() } }, last_elapsed(&paths)?)
            }
            Some(_) => bail!("{} holds a run with other settings than this sweep's; remove it or pick another --out", dir.display()),
        };
        let t0 = Instant::now();
        let outcome = run(&data.corpus, &data.vocab, start, &paths, true, TrainBackend::Fast)?;
        let (ck, _) = paths.stored()?.with_context(|| format!("{} is missing after training", paths.ckpt().display()))?;
        let tests = &data.test[..self.scored.min(data.test.len())];
        let acc = accuracy(&ck.model()?, &ck.vocab, tests)?;
        let seconds = seconds_before + t0.elapsed().as_secs_f64();
        let point = Point {
            model: arch.name().to_string(),
            d_model: d,
            params: num_params(&cfg),
            val_loss: outcome.val_loss,
            accuracy: acc,
            seconds,
            ckpt: paths.ckpt(),
        };
        let done = Finished { config: cfg, settings, point: point.clone() };
        write_atomic(&dir.join(FINISHED), serde_json::to_string_pretty(&done)?.as_bytes())?;
        Ok(point)
    }
}

fn read_finished(dir: &Path) -> Result<Option<Finished>> {
    let path = dir.join(FINISHED);
    if !path.try_exists().with_context(|| format!("reading {}", path.display()))? {
        return Ok(None);
    }
    let text = crate::read::text(&path, crate::read::TEXT_LIMIT, "the finished run")?;
    Ok(Some(serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?))
}

/// Same model and settings, compared as stored (JSON), the way `--resume` compares flags.
fn same_run(cfg_a: &ModelConfig, set_a: &TrainSettings, cfg_b: &ModelConfig, set_b: &TrainSettings) -> Result<bool> {
    Ok(serde_json::to_value(cfg_a)? == serde_json::to_value(cfg_b)? && serde_json::to_value(set_a)? == serde_json::to_value(set_b)?)
}

/// Seconds the earlier process had trained when it last evaluated (log.csv's
/// last column; 0 when the log is missing, which the resume then warns of).
fn last_elapsed(paths: &RunPaths) -> Result<f64> {
    let rows = run_log::read(&paths.log())?.unwrap_or_default();
    Ok(rows.iter().filter_map(|r| r.value(7)).fold(0.0, f64::max))
}

/// Each model's transition from its points (in any order).
pub fn transitions(models: &[Arch], points: &[Point]) -> Vec<Transition> {
    models
        .iter()
        .map(|&arch| {
            let mut ps: Vec<&Point> = points.iter().filter(|p| p.model == arch.name()).collect();
            ps.sort_by_key(|p| p.params);
            // the first index from which every model has learned
            let k = (0..ps.len()).find(|&k| ps[k..].iter().all(|p| p.accuracy >= LEARNED));
            let interpolated = k.map(|k| match k {
                0 => ps[0].params as f64,
                _ => {
                    let (a, b) = (ps[k - 1], ps[k]);
                    // log-linear crossing of the threshold between the two sizes
                    let t = (LEARNED - a.accuracy) / (b.accuracy - a.accuracy);
                    ((a.params as f64).ln() + t * ((b.params as f64).ln() - (a.params as f64).ln())).exp()
                }
            });
            Transition { model: arch.name().to_string(), first_learned: k.map(|k| ps[k].params), interpolated, paper: paper_transition(arch) }
        })
        .collect()
}

fn sci(x: f64) -> String {
    format!("{:.1}e{}", x / 10f64.powi(x.log10().floor() as i32), x.log10().floor() as i32)
}

/// The results and the transitions as markdown tables; `chance`: the majority baseline.
pub fn markdown(points: &[Point], trans: &[Transition], chance: f64) -> String {
    let mut s = String::from("| model | d_model | params | val loss (nats/char) | test accuracy | train + score (s) |\n|---|---|---|---|---|---|\n");
    for p in points {
        s += &format!("| {} | {} | {} | {:.4} | {:.3} | {:.0} |\n", p.model, p.d_model, p.params, p.val_loss, p.accuracy, p.seconds);
    }
    s += &format!("\nAlways answering the most common value of the scored expressions: {chance:.3}.\n");
    s += &format!("\n| model | transition here (smallest >= {LEARNED} from there on) | interpolated crossing | paper |\n|---|---|---|---|\n");
    for t in trans {
        let or_none = |v: Option<f64>| v.map(sci).unwrap_or_else(|| "not reached".into());
        s += &format!(
            "| {} | {} | {} | {} |\n",
            t.model,
            t.first_learned.map(|p| format!("{p} ({})", sci(p as f64))).unwrap_or_else(|| "not reached".into()),
            or_none(t.interpolated),
            t.paper.map(sci).unwrap_or_else(|| "-".into())
        );
    }
    s
}
