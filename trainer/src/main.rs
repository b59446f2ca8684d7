//! `trainer`: train NRGPT / GPT baselines on Tiny Shakespeare, evaluate,
//! sample, and write the character vocabulary.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use nrgpt_core::format::Scheme;
use nrgpt_core::model::num_params;
use nrgpt_core::sample::{generate_streamed, SampleOpts};
use nrgpt_core::{Activation, Arch, BlockNorm, EbtInput, EbtUpdate, EtaInit, EtaKind, GptBlock, ModelConfig, NormKind, Vocab};
use serde::Serialize;
use nrgpt_core::bounds::{MAX_BLOCK, MAX_D_MODEL, MAX_FF_MULT, MAX_HEADS, MAX_HEAD_DIM, MAX_LAYERS, MAX_STEPS};
use trainer::cli_values::{count, dropout, kebab, non_negative, non_negative_f32, positive, temperature, top_p, MAX_SAMPLE_LEN};
use trainer::data::Corpus;
use trainer::eval::{full_loss, monotone_fraction};
use trainer::net::{Net, Thinking};
use trainer::export::export;
use trainer::files::{read_checkpoint, write_atomic};
use trainer::fast::TrainBackend;
use nrgpt_core::ebt::Verify;
use nrgpt_core::ebt_session::{generate_ebt_streamed, EbtSession};
use nrgpt_core::session::{EbtThinkOpts, StepOpts};
use trainer::resume::Requested;
use trainer::stream::CharStream;
use trainer::think_plan::EbtRegularisers;
use trainer::thinking_table::{markdown, scatter_svg, thinking_table, TableSpec};
use trainer::train::{run, RunPaths, Start, TrainSettings};
use trainer::vocab_file::tokenizer_json;

#[derive(Parser)]
#[command(version, about = "Train, evaluate and sample energy-based character models")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Print the result as one JSON object on stdout instead of the text line
    /// (progress and logs stay on stderr), for scripts such as `cargo xtask bench`.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Train a model (or resume a run with --resume).
    Train(TrainArgs),
    /// Loss of a checkpoint over the whole validation split.
    Eval(EvalArgs),
    /// Fraction of tokens whose energy E_A(t) decreases monotonically after the transient (NRGPT).
    Energy(EnergyArgs),
    /// EBT: loss vs thinking steps and candidates on the val split and other texts, and energy vs loss.
    Think(ThinkArgs),
    /// Print text generated from a checkpoint.
    Sample(SampleArgs),
    /// Write a checkpoint's model for inference: no optimizer state, optionally quantized.
    Export {
        #[arg(long)]
        ckpt: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// int8 | int4 | f16 | f32
        #[arg(long, default_value = "int8")]
        quant: Scheme,
    },
    /// ListOps: held-out accuracy vs parameters of NRGPT-FF1, NRGPT-FF2W and gpt-rec, and where each learns the task.
    ListopsSweep(trainer::listops_cli::SweepArgs),
    /// ListOps: one expression through a checkpoint (its greedy chain of thought and answer).
    ListopsAnswer(trainer::listops_cli::AnswerArgs),
    /// Write the character vocabulary of a corpus as tokenizer.json.
    Vocab {
        #[arg(long, default_value = "data/tinyshakespeare/input.txt")]
        data: PathBuf,
        #[arg(long, default_value = "www/tokenizer.json")]
        out: PathBuf,
    },
}

#[derive(Args)]
struct TrainArgs {
    /// nrgpt-ff2w | nrgpt-ff1 | gpt | gpt-rec | ebt
    #[arg(long, default_value = "nrgpt-ff2w")]
    model: Arch,
    #[arg(long, default_value_t = 128, value_parser = count(1, MAX_D_MODEL))]
    d_model: usize,
    #[arg(long, default_value_t = 4, value_parser = count(1, MAX_HEADS))]
    heads: usize,
    /// Query/key width per head (default d_model / heads).
    #[arg(long, value_parser = count(1, MAX_HEAD_DIM))]
    head_dim: Option<usize>,
    /// Recursion steps T (NRGPT, gpt-rec), layers (gpt) or thinking steps (ebt).
    #[arg(long, default_value_t = 4, value_parser = count(1, MAX_STEPS))]
    steps: usize,
    /// Layers of EBT's energy network.
    #[arg(long, default_value_t = 2, value_parser = count(1, MAX_LAYERS))]
    layers: usize,
    /// Std of EBT's initial candidate logits (0: think from the uniform distribution).
    #[arg(long, default_value_t = 1.0, value_parser = non_negative)]
    ebt_noise: f64,
    /// EBT: what a thinking step moves: logits (z - a dE/dz, ours) | probs (softmax(z) - a dE/dy,
    /// the reference's normalize_initial_condition).
    #[arg(long, default_value = "logits", value_parser = kebab::<EbtUpdate>)]
    ebt_update: EbtUpdate,
    /// EBT: how the candidate enters the energy network: tied (softmax(z)^T tok_emb, ours) |
    /// own (a V x D map of its own, the reference's Linear(V, D)).
    #[arg(long, default_value = "tied", value_parser = kebab::<EbtInput>)]
    ebt_input: EbtInput,
    /// EBT: the reference's clamp_futures_grad: a thinking step moves no logit (or probability)
    /// by more than this (0: no clamp). Stored with the model: inference clamps too.
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    ebt_clamp: f64,
    /// EBT: the loss is the last thinking step's alone (the reference's truncate_mcmc), not the mean.
    #[arg(long)]
    ebt_truncate: bool,
    /// EBT: the thinking step size a the run starts from (default e^4.6 = 99.5); fixed with
    /// --ebt-step-lr-mult 0.
    #[arg(long, value_parser = positive)]
    ebt_step_size: Option<f64>,
    /// EBT: coefficient of the reference's contrastive loss, softplus(E(truth) - E(guess)).
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    ebt_contrastive: f64,
    /// EBT: coefficient of minus the correlation, per sequence, of the final energy with the final
    /// loss, so the energy tracks difficulty (ours).
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    ebt_calibrate: f64,
    /// EBT: the reference's soften_target_prob_dist: label smoothing of this much on the first
    /// step's target, falling linearly to none on the last (no effect with --ebt-truncate).
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    ebt_soften: f64,
    /// EBT: std of the Langevin noise added to the candidate before every thinking step.
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    ebt_langevin: f64,
    /// EBT: draw each token's step size log-uniformly in [a/2, 2a].
    #[arg(long)]
    ebt_step_jitter: bool,
    /// EBT: each batch thinks S + a random 0..=N extra steps.
    #[arg(long, default_value_t = 0, value_parser = count(0, 64))]
    ebt_extra_steps: usize,
    /// EBT: fraction of each batch that starts from the replay buffer of final candidates.
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    ebt_replay: f64,
    /// EBT: the step size's learning rate as a multiple of --lr.
    #[arg(long, default_value_t = 1.0, value_parser = non_negative)]
    ebt_step_lr_mult: f64,
    #[arg(long, default_value_t = 64, value_parser = count(1, MAX_BLOCK))]
    block: usize,
    #[arg(long, default_value_t = 32, value_parser = count(1, 1 << 16))]
    batch: usize,
    /// Iterations (default 2000; on --resume, the run's own, or more to extend it).
    #[arg(long, value_parser = count(1, 1 << 40))]
    iters: Option<usize>,
    #[arg(long, default_value_t = 3e-3, value_parser = positive)]
    lr: f64,
    /// Final learning rate of the cosine (default lr / 10).
    #[arg(long, value_parser = non_negative)]
    min_lr: Option<f64>,
    #[arg(long, default_value_t = 100, value_parser = count(0, 1 << 40))]
    warmup: usize,
    #[arg(long, default_value_t = 0.1, value_parser = non_negative)]
    weight_decay: f64,
    #[arg(long, default_value_t = 0.0, value_parser = dropout)]
    dropout: f64,
    /// Dropout on the attention probabilities (NRGPT: inside the descent; the reference's 0.1 on `wei`).
    #[arg(long, default_value_t = 0.0, value_parser = dropout)]
    attn_dropout: f64,
    /// Largest global gradient norm (0: no clipping).
    #[arg(long, default_value_t = 1.0, value_parser = non_negative)]
    grad_clip: f64,
    #[arg(long, default_value_t = 4, value_parser = count(1, MAX_FF_MULT))]
    ff_mult: usize,
    /// layer-norm | rms-norm
    #[arg(long, default_value = "layer-norm", value_parser = kebab::<NormKind>)]
    norm: NormKind,
    /// stable (eta = c diag(gamma)) | free (learned matrix)
    #[arg(long, default_value = "stable", value_parser = kebab::<EtaKind>)]
    eta: EtaKind,
    /// gelu | relu
    #[arg(long, default_value = "gelu", value_parser = kebab::<Activation>)]
    activation: Activation,
    /// NRGPT: free eta's init, identity (ours) | normal (N(0, 0.02), the reference's).
    #[arg(long, value_parser = kebab::<EtaInit>)]
    eta_init: Option<EtaInit>,
    /// NRGPT: the attention's inverse temperature beta (default 1/sqrt(head_dim); the reference: 1).
    #[arg(long, value_parser = positive)]
    attn_beta: Option<f64>,
    /// NRGPT: the attention mask, strict (B < A, ours) | diagonal (B <= A, the reference's; exact self term).
    #[arg(long, value_parser = ["strict", "diagonal"])]
    attn_mask: Option<String>,
    /// NRGPT: the block norm learns a gain (ours) | is bare: gain fixed at 1, learnable bias (the reference's).
    #[arg(long, value_parser = kebab::<BlockNorm>)]
    block_norm: Option<BlockNorm>,
    /// GPT baselines: sequential (ours: MLP after attention, GPT-2 init) | parallel (the
    /// reference's GPT_Rec_parallel block: both branches read x; plain N(0, 0.02) init).
    #[arg(long, value_parser = kebab::<GptBlock>)]
    gpt_block: Option<GptBlock>,
    /// reference: the reference's model choices together; NRGPT: beta 1, mask with the diagonal,
    /// free eta from N(0, 0.02), bare block norm, full-rank J (head_dim = d_model); gpt and gpt-rec:
    /// the parallel block with ReLU (its GPT_Rec_parallel). A flag given beside it wins.
    /// ebt-s2 (EBT only): the reference's System-2 script (job_scripts/nlp/pretrain/ebt_s2.sh)
    /// scaled to 65 characters: probs update, own input map, last-step loss, fixed step 1.5 jittered per token,
    /// start noise 0.6, Langevin 1.9 before each step, 2 or 3 steps, half of each batch replayed.
    #[arg(long, value_parser = ["reference", "ebt-s2"])]
    preset: Option<String>,
    #[arg(long, default_value_t = 250, value_parser = count(1, 1 << 40))]
    eval_every: usize,
    #[arg(long, default_value_t = 20, value_parser = count(1, 1 << 20))]
    eval_iters: usize,
    #[arg(long, default_value_t = 1337)]
    seed: u64,
    #[arg(long, default_value = "data/tinyshakespeare/input.txt")]
    data: PathBuf,
    #[arg(long, default_value = "www/tokenizer.json")]
    vocab: PathBuf,
    /// Run folder for ckpt.safetensors and log.csv (default runs/MODEL).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run in --out from its checkpoint, exactly where it stopped.
    #[arg(long)]
    resume: bool,
    /// Start a new run in --out even though it holds one: its checkpoint,
    /// best model and log are removed first (without this, that is refused).
    #[arg(long, conflicts_with = "resume")]
    overwrite: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// fast | candle (autograd; the reference the fast backend is tested against)
    #[arg(long, default_value = "fast")]
    backend: TrainBackend,
}

/// A checkpoint run over the corpus: what `eval` and `energy` both read.
#[derive(Args)]
struct CkptOnData {
    #[arg(long)]
    ckpt: PathBuf,
    #[arg(long, default_value = "data/tinyshakespeare/input.txt")]
    data: PathBuf,
    /// Recursion steps to run (default: the checkpoint's).
    #[arg(long, value_parser = count(1, MAX_STEPS))]
    steps: Option<usize>,
}

#[derive(Args)]
struct EvalArgs {
    #[command(flatten)]
    on: CkptOnData,
    #[arg(long, default_value_t = 16, value_parser = count(1, 1 << 16))]
    batch: usize,
    /// Which split: val (default) or train (the overfitting gap).
    #[arg(long, default_value = "val", value_parser = ["val", "train"])]
    split: String,
    /// Only the first N characters of the split (default: all of it); at
    /// least one window (block size + 1).
    #[arg(long, value_parser = count(2, usize::MAX))]
    max_chars: Option<usize>,
    /// EBT: candidates thought per character, the lowest final energy kept (self-verification).
    #[arg(long, default_value_t = 1, value_parser = count(1, 1024))]
    samples: usize,
    /// EBT self-verification: min (final energy) | max-gap (largest drop).
    #[arg(long, default_value = "min")]
    verify: Verify,
}

#[derive(Args)]
struct ThinkArgs {
    #[arg(long)]
    ckpt: PathBuf,
    /// The corpus whose val split is the first text.
    #[arg(long, default_value = "data/tinyshakespeare/input.txt")]
    data: PathBuf,
    /// More texts, each read whole (e.g. data/ood/hamlet.txt); repeatable.
    #[arg(long)]
    ood: Vec<PathBuf>,
    /// Thinking step counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32", value_parser = count(0, MAX_STEPS))]
    steps: Vec<usize>,
    /// Candidate counts (best by self-verification), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16", value_parser = count(1, 256))]
    samples: Vec<usize>,
    /// Self-verification: min (final energy) | max-gap (largest drop).
    #[arg(long, default_value = "min")]
    verify: Verify,
    /// Only the first N characters of each text.
    #[arg(long, default_value_t = 20_000, value_parser = count(2, usize::MAX))]
    max_chars: usize,
    #[arg(long, default_value_t = 16, value_parser = count(1, 1 << 16))]
    batch: usize,
    /// Write the energy-vs-loss scatter of the val split as SVG here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Langevin noise std added to every candidate before each thinking
    /// step, as the reference's inference does (0 = deterministic descent).
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    langevin: f64,
}

#[derive(Args)]
struct EnergyArgs {
    #[command(flatten)]
    on: CkptOnData,
    /// Steps treated as the transient: monotonicity is judged from this step on.
    #[arg(long, default_value_t = 1, value_parser = count(0, MAX_STEPS))]
    skip: usize,
    /// Validation windows to measure.
    #[arg(long, default_value_t = 64, value_parser = count(1, 1 << 16))]
    windows: usize,
}

#[derive(Args)]
struct SampleArgs {
    #[arg(long)]
    ckpt: PathBuf,
    #[arg(long, default_value = "ROMEO:\n")]
    prompt: String,
    /// Characters to generate (at most 100000).
    #[arg(long, default_value_t = 300, value_parser = count(1, MAX_SAMPLE_LEN))]
    len: usize,
    /// 0: greedy.
    #[arg(long, default_value_t = 0.8, value_parser = temperature)]
    temperature: f32,
    /// Keep the k most likely characters (0 or absent: all, as on the page).
    #[arg(long, value_parser = count(0, usize::MAX))]
    top_k: Option<usize>,
    #[arg(long, value_parser = top_p)]
    top_p: Option<f32>,
    #[arg(long, default_value_t = 1337)]
    seed: u64,
    /// EBT: thinking steps per character (default: as trained).
    #[arg(long, value_parser = count(0, MAX_STEPS))]
    steps: Option<usize>,
    /// EBT: candidates per character, the one self-verification prefers kept.
    #[arg(long, default_value_t = 1, value_parser = count(1, 256))]
    samples: usize,
    /// EBT self-verification: min (final energy) | max-gap (largest drop).
    #[arg(long, default_value = "min")]
    verify: Verify,
    /// EBT: stop a candidate's thinking before a step that would raise its energy.
    #[arg(long)]
    accept_lower: bool,
    /// EBT: stop a candidate's thinking once its energy changes by less than this.
    #[arg(long, value_parser = non_negative_f32)]
    early_exit: Option<f32>,
    /// EBT: Langevin noise std added to each candidate before every thinking step.
    #[arg(long, default_value_t = 0.0, value_parser = non_negative_f32)]
    langevin: f32,
    /// Also write the run's per-character trace (JSON) for the widget's poster.
    #[arg(long)]
    trace: Option<PathBuf>,
}

/// The model options of `a`, with `--preset reference` filling every one
/// its own flag did not set. Returns the config and the clap ids the preset
/// set (a resumed run checks them as if given).
fn model_config(a: &TrainArgs, vocab_len: usize, given: &[String]) -> (ModelConfig, Vec<String>) {
    let reference = a.preset.as_deref() == Some("reference");
    let (nrgpt, gpt) = (a.model.is_nrgpt(), matches!(a.model, Arch::Gpt | Arch::GptRec));
    let set = |id: &str| given.iter().any(|g| g == id);
    let mut by_preset = Vec::new();
    // the preset sets `id` for the models it `applies` to, unless the flag is given
    let mut pick = |id: &str, own: bool, applies: bool| {
        let use_preset = reference && applies && !own;
        if use_preset {
            by_preset.push(id.to_string());
        }
        use_preset
    };
    let mut cfg = ModelConfig::new(a.model, vocab_len, a.d_model, a.heads, a.steps, a.block);
    cfg.head_dim = if pick("head_dim", a.head_dim.is_some(), nrgpt) { a.d_model } else { a.head_dim.unwrap_or(a.d_model / a.heads.max(1)) };
    cfg.ff_mult = a.ff_mult;
    cfg.norm = a.norm;
    cfg.eta = if pick("eta", set("eta"), nrgpt) { EtaKind::Free } else { a.eta };
    cfg.eta_init = if pick("eta_init", a.eta_init.is_some(), nrgpt) { EtaInit::Normal } else { a.eta_init.unwrap_or_default() };
    cfg.attn_beta = if pick("attn_beta", a.attn_beta.is_some(), nrgpt) { Some(1.0) } else { a.attn_beta };
    cfg.attn_diag = if pick("attn_mask", a.attn_mask.is_some(), nrgpt) { true } else { a.attn_mask.as_deref() == Some("diagonal") };
    cfg.block_norm = if pick("block_norm", a.block_norm.is_some(), nrgpt) { BlockNorm::Bare } else { a.block_norm.unwrap_or_default() };
    // the reference's baselines: GPT_Rec_parallel's block, ReLU (its FeedForward)
    cfg.gpt_block = if pick("gpt_block", a.gpt_block.is_some(), gpt) { GptBlock::Parallel } else { a.gpt_block.unwrap_or_default() };
    cfg.activation = if pick("activation", set("activation"), gpt) { Activation::Relu } else { a.activation };
    cfg.layers = a.layers;
    cfg.ebt_noise = a.ebt_noise;
    cfg.ebt_update = a.ebt_update;
    cfg.ebt_input = a.ebt_input;
    cfg.ebt_clamp = a.ebt_clamp;
    (cfg, by_preset)
}

/// `--preset ebt-s2`: the System-2 script's EBT choices (alexiglad/EBT
/// job_scripts/nlp/pretrain/ebt_s2.sh), each unless its own flag is given.
/// Scaled to 65 characters (docs/ebt.md says why): its softmax(N(0, sigma^2))
/// over V entries has entropy about ln V - sigma^2 / 2, so sigma scales with
/// sqrt(ln V): 3.0 -> 1.9 for Langevin, 1.0 -> 0.6 for the start. Its step 5
/// acts on a Linear(V, D) under Xavier init (std 0.0063 at V = 50,277), ours
/// on the token embedding at std 0.02, 3.2x larger gradients: 5 -> 1.5.
/// Steps: `randint(2, 4)` in training, so S = 2 with one extra step.
/// Returns the clap ids it set (a resumed run checks them as if given).
fn apply_ebt_s2(a: &mut TrainArgs, given: &[String]) -> Result<Vec<String>> {
    if a.preset.as_deref() != Some("ebt-s2") {
        return Ok(Vec::new());
    }
    if a.model != Arch::Ebt {
        bail!("--preset ebt-s2 is EBT's System-2 recipe; --model is {}", a.model.name());
    }
    let mut set = Vec::new();
    let mut pick = |id: &str| {
        let own = given.iter().any(|g| g == id);
        if !own {
            set.push(id.to_string());
        }
        !own
    };
    if pick("ebt_update") {
        a.ebt_update = EbtUpdate::Probs;
    }
    if pick("ebt_input") {
        a.ebt_input = EbtInput::Own;
    }
    if pick("ebt_truncate") {
        a.ebt_truncate = true;
    }
    if pick("ebt_step_size") {
        a.ebt_step_size = Some(1.5);
    }
    if pick("ebt_step_lr_mult") {
        a.ebt_step_lr_mult = 0.0;
    }
    if pick("ebt_step_jitter") {
        a.ebt_step_jitter = true;
    }
    if pick("ebt_noise") {
        a.ebt_noise = 0.6;
    }
    if pick("ebt_langevin") {
        a.ebt_langevin = 1.9;
    }
    if pick("steps") {
        a.steps = 2;
    }
    if pick("ebt_extra_steps") {
        a.ebt_extra_steps = 1;
    }
    if pick("ebt_replay") {
        a.ebt_replay = 0.5;
    }
    Ok(set)
}

/// EBT's own flags on another model would do nothing: refused by name.
fn check_ebt_flags(a: &TrainArgs, given: &[String]) -> Result<()> {
    if a.model == Arch::Ebt {
        return Ok(());
    }
    let ebt: Vec<String> = given.iter().filter(|id| id.starts_with("ebt_")).map(|id| format!("--{}", id.replace('_', "-"))).collect();
    if !ebt.is_empty() {
        bail!("{} only apply to --model ebt, not {}", ebt.join(", "), a.model.name());
    }
    Ok(())
}

/// Options of `sample` / `eval` that only an EBT's thinking reads: given for
/// another model they would do nothing, so they are refused by name.
fn check_thinking_flags(ckpt: &Path, arch: Arch, given: &[String], ebt_only: &[&str]) -> Result<()> {
    if arch == Arch::Ebt {
        return Ok(());
    }
    let flags: Vec<String> = given.iter().filter(|id| ebt_only.contains(&id.as_str())).map(|id| format!("--{}", id.replace('_', "-"))).collect();
    if !flags.is_empty() {
        let verb = if flags.len() == 1 { "applies" } else { "apply" };
        bail!("{} only {verb} to an EBT; {} is a {}", flags.join(", "), ckpt.display(), arch.name());
    }
    Ok(())
}

/// The clap ids of the options given on the command line (not defaults).
fn given(m: &clap::ArgMatches) -> Vec<String> {
    m.ids().map(|id| id.to_string()).filter(|id| m.value_source(id) == Some(ValueSource::CommandLine)).collect()
}

fn load_vocab(path: &Path) -> Result<Vocab> {
    let json = trainer::read::text(path, trainer::read::TEXT_LIMIT, "the vocabulary")?;
    Vocab::from_tokenizer_json(&json).with_context(|| format!("parsing {}", path.display()))
}

/// What `train --json` prints: the run as its final checkpoint records it,
/// and the speed and time of this invocation.
#[derive(Serialize)]
struct TrainReport {
    /// Iterations the run has completed (all of them, across resumes).
    iters: usize,
    /// Training speed of this invocation's steps (0 when none were left to run).
    tokens_per_s: f64,
    /// Estimates over `eval_iters` random batches at the last iteration, nats/char.
    train_loss: f64,
    val_loss: f64,
    params: usize,
    /// Wall time of this invocation, evaluations and checkpoints included.
    seconds: f64,
    out: PathBuf,
    ckpt: PathBuf,
    log: PathBuf,
}

/// `given`: the clap ids of the options on the command line (a resumed run checks them).
fn train(mut a: TrainArgs, mut given: Vec<String>, json: bool) -> Result<()> {
    check_ebt_flags(&a, &given)?;
    let by_s2 = apply_ebt_s2(&mut a, &given)?;
    given.extend(by_s2);
    let vocab = load_vocab(&a.vocab)?;
    let corpus = Corpus::load(&a.data, &vocab)?;
    let (cfg, by_preset) = model_config(&a, vocab.len(), &given);
    given.extend(by_preset);
    if !a.resume {
        trainer::budget::train(&cfg, a.batch, "--batch", a.dropout > 0.0 || a.attn_dropout > 0.0)?;
    }
    let settings = TrainSettings {
        batch: a.batch,
        iters: a.iters.unwrap_or(2000),
        lr: a.lr,
        min_lr: a.min_lr.unwrap_or(a.lr / 10.0),
        warmup: a.warmup,
        weight_decay: a.weight_decay,
        dropout: a.dropout,
        attn_dropout: a.attn_dropout,
        grad_clip: a.grad_clip,
        eval_every: a.eval_every,
        eval_iters: a.eval_iters,
        seed: a.seed,
        ebt: EbtRegularisers {
            langevin: a.ebt_langevin,
            step_jitter: a.ebt_step_jitter,
            extra_steps: a.ebt_extra_steps,
            replay: a.ebt_replay,
            step_lr_mult: a.ebt_step_lr_mult,
            truncate: a.ebt_truncate,
            step_size: a.ebt_step_size,
            contrastive: a.ebt_contrastive,
            calibrate: a.ebt_calibrate,
            soften: a.ebt_soften,
        },
    };
    settings.ebt.check()?;
    let paths = RunPaths { dir: a.out.unwrap_or_else(|| PathBuf::from("runs").join(a.model.name())) };
    let start = if a.resume {
        Start::Resume { iters: a.iters, requested: Requested { cfg, settings, given } }
    } else {
        Start::Fresh { cfg, settings, overwrite: a.overwrite }
    };
    let t0 = Instant::now();
    let out = run(&corpus, &vocab, start, &paths, a.quiet, a.backend)?;
    if json {
        // The checkpoint, not the flags, knows the iteration count and model of a resumed run.
        let (ck, state) = paths.stored()?.with_context(|| format!("{} is missing after training", paths.ckpt().display()))?;
        return print_json(&TrainReport {
            iters: state.iter,
            tokens_per_s: out.tokens_per_s,
            train_loss: out.train_loss,
            val_loss: out.val_loss,
            params: num_params(&ck.config),
            seconds: t0.elapsed().as_secs_f64(),
            out: paths.dir.clone(),
            ckpt: paths.ckpt(),
            log: paths.log(),
        });
    }
    println!("done: train {:.4} val {:.4} | {:.0} tokens/s | checkpoint {}", out.train_loss, out.val_loss, out.tokens_per_s, paths.ckpt().display());
    Ok(())
}

/// Prints `value` as the single line a `--json` caller parses.
fn print_json(value: &impl Serialize) -> Result<()> {
    println!("{}", serde_json::to_string(value).context("serializing the JSON report")?);
    Ok(())
}

#[derive(Serialize)]
struct EvalReport {
    split: String,
    /// Nats/char over every full window of the first `chars` characters.
    loss: f64,
    chars: usize,
    /// Recursion steps the model ran.
    steps: usize,
    ckpt: PathBuf,
}

#[derive(Serialize)]
struct EnergyReport {
    monotone_fraction: f64,
    tokens: usize,
    /// Recursion steps the model ran.
    steps: usize,
    skip: usize,
    eta: &'static str,
    ckpt: PathBuf,
}

#[derive(Serialize)]
struct SampleReport {
    prompt: String,
    /// The generated continuation, without the prompt.
    text: String,
}

#[derive(Serialize)]
struct ExportReport {
    params: usize,
    bytes: usize,
    ratio_to_f32: f64,
    scheme: String,
    ckpt: PathBuf,
    out: PathBuf,
}

#[derive(Serialize)]
struct VocabReport {
    chars: usize,
    out: PathBuf,
}

/// `eval`'s options that only an EBT reads.
const EVAL_EBT_ONLY: &[&str] = &["samples", "verify"];
/// `sample`'s options that only an EBT reads. (`--steps` is not refused:
/// `cargo xtask widgets` passes a widget's steps whatever its model, as the
/// page's worker reads them, for an EBT only.)
const SAMPLE_EBT_ONLY: &[&str] = &["samples", "verify", "accept_lower", "early_exit", "langevin"];

fn eval(a: EvalArgs, given: &[String], json: bool) -> Result<()> {
    let ck = read_checkpoint(&a.on.ckpt)?;
    check_thinking_flags(&a.on.ckpt, ck.config.arch, given, EVAL_EBT_ONLY)?;
    let split = &trainer::data::load_split(&a.on.data, &ck.vocab, a.split == "train", a.max_chars)?;
    trainer::budget::evaluate(&ck.config, a.batch, split.len() / ck.config.block_size, a.on.steps, a.samples)?;
    let net = Net::new(&ck.config, &ck.weights)?;
    let pb = indicatif::ProgressBar::new(0);
    let think = Thinking { steps: a.on.steps, samples: a.samples, verify: a.verify };
    let loss = full_loss(&net, split, a.batch, think, &mut |done, total| {
        pb.set_length(total as u64);
        pb.set_position(done as u64);
    })?;
    pb.finish_and_clear();
    if json {
        let steps = a.on.steps.unwrap_or(ck.config.steps);
        return print_json(&EvalReport { split: a.split, loss, chars: split.len(), steps, ckpt: a.on.ckpt });
    }
    println!("{} loss {loss:.4} nats/char over {} characters ({})", a.split, split.len(), a.on.ckpt.display());
    Ok(())
}

fn think(a: ThinkArgs, json: bool) -> Result<()> {
    let ck = read_checkpoint(&a.ckpt)?;
    if ck.config.arch != Arch::Ebt {
        anyhow::bail!("{} is a {}, not an EBT: only an EBT thinks", a.ckpt.display(), ck.config.arch.name());
    }
    let (max_steps, max_samples) = (a.steps.iter().copied().max(), a.samples.iter().copied().max().unwrap_or(1));
    trainer::budget::evaluate(&ck.config, a.batch, a.max_chars / ck.config.block_size, max_steps, max_samples)?;
    let spec = TableSpec { steps: a.steps, samples: a.samples, verify: a.verify, batch: a.batch, langevin: a.langevin };
    let mut texts = vec![(format!("{} (val split)", a.data.display()), trainer::data::load_split(&a.data, &ck.vocab, false, Some(a.max_chars))?)];
    for path in &a.ood {
        let (text, _) = trainer::read::CharReader::open(path, trainer::read::TEXT_LIMIT, "the text")?.read(a.max_chars, true)?;
        let ids = ck.vocab.encode(&text).with_context(|| format!("encoding {}", path.display()))?;
        // checked before the val split's table: an unusable text must not cost that wait
        let window = ck.config.block_size + 1;
        if ids.len() < window {
            bail!(
                "{} has {} characters (of the --max-chars read): --ood needs at least one window of {window} (the model's block size + 1)",
                path.display(),
                ids.len()
            );
        }
        texts.push((path.display().to_string(), ids));
    }
    let mut reports = Vec::new();
    for (i, (name, ids)) in texts.iter().enumerate() {
        let ids = &ids[..a.max_chars.min(ids.len())];
        let pb = indicatif::ProgressBar::new(0).with_message(name.clone());
        let t = thinking_table(&ck.config, &ck.weights, ids, &spec, &mut |done, total| {
            pb.set_length(total as u64);
            pb.set_position(done as u64);
        })
        .with_context(|| format!("thinking over {name}"))?;
        pb.finish_and_clear();
        if let (0, Some(plot)) = (i, &a.plot) {
            let title = format!("{}: final energy vs loss per character (r = {:.3})", a.ckpt.display(), t.energy_loss_corr);
            write_atomic(plot, scatter_svg(&title, &t.points).as_bytes())?;
        }
        if !json {
            println!("{}", markdown(name, &t, &spec));
        }
        reports.push(serde_json::json!({ "text": name, "table": t }));
    }
    if json {
        return print_json(&reports);
    }
    Ok(())
}

fn sample(a: SampleArgs, given: &[String], json: bool) -> Result<()> {
    let ck = read_checkpoint(&a.ckpt)?;
    check_thinking_flags(&a.ckpt, ck.config.arch, given, SAMPLE_EBT_ONLY)?;
    trainer::budget::sample(&ck.config, a.prompt.chars().count(), a.len, a.steps, a.samples)?;
    let opts = SampleOpts { temperature: a.temperature, top_k: a.top_k, top_p: a.top_p, seed: a.seed };
    let ebt = EbtThinkOpts { samples: a.samples, verify: a.verify, accept_lower: a.accept_lower, seed: a.seed, langevin: a.langevin };
    let step = StepOpts { steps: a.steps, early_exit: a.early_exit, ebt };
    // a prompt the model cannot read is refused before any of it is printed
    ck.vocab.encode(&a.prompt).context("the prompt")?;
    let mut stream = CharStream::stdout(a.len, json);
    stream.write(&a.prompt).context("writing to stdout")?;
    let mut emit = |ch: &str| stream.emit(ch);
    let text = if ck.config.arch == Arch::Ebt {
        generate_ebt_streamed(&mut EbtSession::new(&ck)?, &a.prompt, a.len, &opts, &step, &mut emit)?
    } else {
        generate_streamed(&ck.model()?, &ck.vocab, &a.prompt, a.len, &opts, &mut emit)?
    };
    if let Some(e) = stream.failure() {
        return Err(e).context("writing the sample to stdout");
    }
    stream.write("\n").context("writing to stdout")?;
    if let Some(path) = &a.trace {
        let recorded = trainer::poster::trace(&ck, &a.prompt, a.len, &opts, &step)?;
        // The poster stands in for the live run: it must be the same text.
        anyhow::ensure!(recorded.text == text, "the traced run wrote {:?}, sample wrote {text:?}", recorded.text);
        let json = serde_json::to_string(&recorded).context("serialising the trace")?;
        write_atomic(path, (json + "\n").as_bytes())?;
    }
    if json {
        return print_json(&SampleReport { prompt: a.prompt, text });
    }
    Ok(())
}

fn energy(a: EnergyArgs, json: bool) -> Result<()> {
    let ck = read_checkpoint(&a.on.ckpt)?;
    let corpus = Corpus::load(&a.on.data, &ck.vocab)?;
    trainer::budget::evaluate(&ck.config, a.windows, corpus.val.len() / ck.config.block_size, a.on.steps, 1)?;
    let model = ck.model()?;
    let m = monotone_fraction(&model, &corpus.val, a.windows, a.on.steps, a.skip)?;
    if json {
        return print_json(&EnergyReport {
            monotone_fraction: m.fraction,
            tokens: m.tokens,
            steps: m.steps,
            skip: a.skip,
            eta: ck.config.eta.name(),
            ckpt: a.on.ckpt,
        });
    }
    println!(
        "energy monotone after step {}: {:.4} of {} tokens ({} steps, eta {}, {})",
        a.skip,
        m.fraction,
        m.tokens,
        m.steps,
        ck.config.eta.name(),
        a.on.ckpt.display()
    );
    Ok(())
}

fn main() -> Result<()> {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let json = cli.json;
    let sub = matches.subcommand().map(|(_, m)| m).context("the subcommand's matches")?;
    match cli.cmd {
        Cmd::Train(a) => train(a, given(sub), json),
        Cmd::Eval(a) => eval(a, &given(sub), json),
        Cmd::Energy(a) => energy(a, json),
        Cmd::Think(a) => think(a, json),
        Cmd::Sample(a) => sample(a, &given(sub), json),
        Cmd::Export { ckpt, out, quant } => {
            let e = export(&ckpt, &out, quant)?;
            if json {
                let ratio_to_f32 = e.ratio_to_f32();
                return print_json(&ExportReport { params: e.params, bytes: e.bytes, ratio_to_f32, scheme: quant.to_string(), ckpt, out });
            }
            println!("wrote {} ({quant}): {} bytes, {:.1}% of the f32 weights | {} params", out.display(), e.bytes, 100.0 * e.ratio_to_f32(), e.params);
            Ok(())
        }
        Cmd::ListopsSweep(a) => {
            let command = std::iter::once("trainer".to_string()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ");
            trainer::listops_cli::sweep(&a, &command, json)
        }
        Cmd::ListopsAnswer(a) => trainer::listops_cli::answer(&a, json),
        Cmd::Vocab { data, out } => {
            let text = trainer::read::text(&data, trainer::read::TEXT_LIMIT, "the corpus")?;
            let vocab = Vocab::from_text(&text).with_context(|| format!("the characters of {}", data.display()))?;
            write_atomic(&out, tokenizer_json(&vocab)?.as_bytes())?;
            if json {
                return print_json(&VocabReport { chars: vocab.len(), out });
            }
            println!("wrote {} ({} characters)", out.display(), vocab.len());
            Ok(())
        }
    }
}
