//! What a config will make the code allocate, in bytes, so an in-range file
//! or flag that asks for more than the machine can give is refused with a
//! message instead of killing the process (`memory allocation of N bytes
//! failed` aborts; in a browser it kills the tab).
//!
//! Every figure is an upper bound, sums of products of config fields with
//! generous multiples: `tests/memory_budget.rs` measures what decoding and
//! the reference forward really allocate for random small configs and holds
//! these above it; `trainer/tests/memory_budget.rs` does the same for a
//! training step. Products saturate, so a hostile config cannot wrap them.

use crate::layout::WeightLayout;
use crate::{Arch, Error, ModelConfig, Result};

/// A ceiling on the bytes one task may allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub name: &'static str,
    pub bytes: u64,
}

/// A native process (the trainer, the engine's tests): 8 GiB, below a
/// laptop's memory, far above any model here (the default trains in ~50 MB).
pub const NATIVE: Budget = Budget { name: "native", bytes: 8 << 30 };
/// The page: 1 GiB of a wasm32 tab's 4 GiB address space, which the file's
/// bytes, the JS heap and the GPU's staging copies share.
pub const PAGE: Budget = Budget { name: "page", bytes: 1 << 30 };
/// The budget of this build: the page's in the browser, else the native one.
pub const HERE: Budget = if cfg!(target_arch = "wasm32") { PAGE } else { NATIVE };

/// A quantity a term grows with, named as the user can change it: a config
/// field (`block_size`), a flag (`--batch`) or an input (the prompt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figure {
    pub name: &'static str,
    pub value: u64,
}

impl Figure {
    pub fn new(name: &'static str, value: usize) -> Self {
        Self { name, value: value as u64 }
    }
}

/// One part of an estimate: `multiple` x the product of `factors` (a
/// factor may appear twice: context^2) f32 values.
#[derive(Debug, Clone)]
pub struct Term {
    pub what: &'static str,
    pub multiple: u64,
    pub factors: Vec<Figure>,
}

impl Term {
    fn new(what: &'static str, multiple: u64, factors: &[Figure]) -> Self {
        Self { what, multiple, factors: factors.to_vec() }
    }

    pub fn bytes(&self) -> u64 {
        self.factors.iter().fold(4 * self.multiple, |acc, f| acc.saturating_mul(f.value))
    }

    /// The factor the term grows with most: the largest one (a squared
    /// figure counts with its square).
    pub fn driver(&self) -> Figure {
        let power = |f: &Figure| self.factors.iter().filter(|g| g.name == f.name).fold(1u64, |a, _| a.saturating_mul(f.value));
        *self.factors.iter().max_by_key(|f| power(f)).expect("every term has a factor")
    }
}

impl std::fmt::Display for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.factors.iter().map(|x| format!("{}={}", x.name, x.value)).collect();
        write!(f, "{} ({} x {} floats)", self.what, self.multiple, names.join(" x "))
    }
}

/// An estimate of one task (e.g. "decoding", "evaluating a batch").
#[derive(Debug, Clone)]
pub struct Estimate {
    pub task: String,
    pub terms: Vec<Term>,
}

/// A task past its budget: what it would need, its largest term and the figure driving it.
#[derive(Debug, thiserror::Error)]
#[error("{task} would allocate about {need}, past the {budget} memory budget of {limit}: the largest part is {term}, driven by {driver}")]
pub struct OverBudget {
    pub task: String,
    pub need: String,
    pub budget: &'static str,
    pub limit: String,
    pub term: String,
    pub driver: String,
}

/// Bytes in GiB with two decimals, for messages.
fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

impl Estimate {
    pub fn bytes(&self) -> u64 {
        self.terms.iter().fold(0u64, |acc, t| acc.saturating_add(t.bytes()))
    }

    /// Refuses a task past `budget`, naming its largest term and the figure driving it.
    pub fn check(&self, budget: Budget) -> Result<()> {
        let need = self.bytes();
        if need <= budget.bytes {
            return Ok(());
        }
        let top = self.terms.iter().max_by_key(|t| t.bytes()).expect("a task past a budget has a term");
        let driver = top.driver();
        Err(Error::Budget(Box::new(OverBudget {
            task: self.task.clone(),
            need: gib(need),
            budget: budget.name,
            limit: gib(budget.bytes),
            term: top.to_string(),
            driver: format!("{}={}", driver.name, driver.value),
        })))
    }
}

/// The config fields every estimate reads, named for messages.
struct Dims {
    v: Figure,
    d: Figure,
    h: Figure,
    dh: Figure,
    /// ff_mult x d_model.
    m: Figure,
    params: Figure,
}

fn dims(cfg: &ModelConfig) -> Dims {
    Dims {
        v: Figure::new("vocab_size", cfg.vocab_size),
        d: Figure::new("d_model", cfg.d_model),
        h: Figure::new("n_head", cfg.n_head),
        dh: Figure::new("head_dim", cfg.head_dim),
        m: Figure { name: "ff_mult*d_model", value: (cfg.ff_mult as u64).saturating_mul(cfg.d_model as u64) },
        // the reader's bounds hold the count to 2^28 before any estimate
        params: Figure::new("parameters", WeightLayout::new(cfg).num_params()),
    }
}

/// The fixed part of every estimate (4 MiB): what a process allocates once.
pub const RUNTIME: &str = "the runtime's fixed buffers";

/// What every task allocates besides its arrays: the runtime's fixed
/// buffers (the first matrix product starts thread pools), and the parsed
/// header (a name, a shape and a digest per stored tensor, the vocabulary).
fn overhead(cfg: &ModelConfig) -> [Term; 3] {
    // a weight, its int8 codes and scales or its two moments
    let tensors = Figure { name: "3*tensors", value: 3 * WeightLayout::new(cfg).specs.len() as u64 };
    [
        Term::new(RUNTIME, 1 << 20, &[Figure { name: "1", value: 1 }]),
        Term::new("the parsed header per tensor", 256, &[tensors]),
        Term::new("the parsed vocabulary", 32, &[Figure::new("vocab_size", cfg.vocab_size)]),
    ]
}

/// The repeated part of a model: NRGPT's descent steps, a GPT's layers
/// (`steps` of them; gpt-rec applies one `steps` times), an EBT's layers.
fn levels(cfg: &ModelConfig) -> Figure {
    match cfg.arch {
        Arch::Ebt => Figure::new("layers", cfg.layers),
        _ => Figure::new("steps", cfg.steps),
    }
}

/// Decoding one window of `block_size` characters as the page does, and
/// what every loader checks a file against: the incremental engine for
/// NRGPT (a key cache per descent level, on the CPU and on the GPU with its
/// CPU twin) and EBT (keys and values per layer, one candidate), the
/// recomputing reference for the GPT baselines.
pub fn decode(cfg: &ModelConfig) -> Estimate {
    let Dims { v, d, h, dh, m, params } = dims(cfg);
    let n = Figure::new("block_size", cfg.block_size);
    let weights = Term::new("the weights as f32 (the file's values, the engine's and the GPU twin's copies)", 4, &[params]);
    let terms = match cfg.arch {
        Arch::NrgptFf1 | Arch::NrgptFf2w => {
            let levels = Figure::new("steps+1", cfg.steps + 1);
            vec![
                weights,
                Term::new("the key cache, CPU and GPU", 2, &[levels, n, h, dh]),
                Term::new("each character's trace (logits per level), CPU and GPU", 4, &[levels, v]),
                Term::new("each character's attention scores", 4, &[h, n]),
                Term::new("each character's state, queries and keys", 16, &[h, dh]),
                Term::new("each character's state and norm", 32, &[d]),
                Term::new("each character's feed-forward", 16, &[m]),
            ]
        }
        Arch::Ebt => {
            let (l, s) = (levels(cfg), Figure::new("steps+1", cfg.steps + 1));
            vec![
                weights,
                Term::new("the key and value caches, CPU and GPU", 4, &[l, n, h, dh]),
                Term::new("a candidate's attention per layer, CPU and GPU", 8, &[l, h, n]),
                Term::new("a candidate's activations per layer", 24, &[l, h, dh]),
                Term::new("a candidate's states per layer", 48, &[l, d]),
                Term::new("a candidate's feed-forward per layer", 16, &[l, m]),
                Term::new("a candidate's logits per thinking step", 8, &[s, v]),
            ]
        }
        Arch::Gpt | Arch::GptRec => forward(cfg, Figure::new("batch", 1), n).terms,
    };
    let mut terms = terms;
    terms.extend(overhead(cfg));
    Estimate { task: format!("decoding a window of block_size={} characters", cfg.block_size), terms }
}

const WEIGHTS: &str = "the weights as f32 (the file's values and the model's copies)";

/// The reference forward of an NRGPT or GPT over `batch` windows of
/// `context` characters (`trainer eval`, `energy`, `sample`; the page's GPT
/// baselines): the attention scores and the activations of one level live
/// at a time (with candle's temporaries), the logits, and the states and
/// energies of every level when recorded.
pub fn forward(cfg: &ModelConfig, batch: Figure, context: Figure) -> Estimate {
    let Dims { v, d, h, dh, m, params } = dims(cfg);
    let levels = Figure::new("steps+1", cfg.steps + 1);
    let (b, n) = (batch, context);
    Estimate {
        task: format!("the forward over {} x {} characters", b.value, n.value),
        terms: vec![
            Term::new(WEIGHTS, 4, &[params]),
            // measured: 4.1 maps at the peak (scores, softmax, masked probabilities)
            Term::new("the attention scores", 6, &[b, h, n, n]),
            Term::new("the queries, keys and values", 12, &[b, n, h, dh]),
            Term::new("the states", 16, &[b, n, d]),
            Term::new("the feed-forward", 12, &[b, n, m]),
            Term::new("the logits", 6, &[b, n, v]),
            Term::new("the recorded states", 2, &[levels, b, n, d]),
            Term::new("the masks", 8, &[n, n]),
        ]
        .into_iter()
        .chain(overhead(cfg))
        .collect(),
    }
}

/// An EBT thinking `steps` steps on `samples` candidates for `batch`
/// windows of `context` characters (`trainer eval`, `think` and `sample` of an
/// EBT): the fast backend's workspace, each step's candidates and the best kept.
pub fn think(cfg: &ModelConfig, batch: Figure, context: Figure, steps: usize, samples: usize) -> Estimate {
    let v = Figure::new("vocab_size", cfg.vocab_size);
    let mut e = workspace(cfg, batch, context);
    e.task = format!("thinking over {} x {} characters", batch.value, context.value);
    let s = Figure::new("thinking_steps+3", steps + 3);
    e.terms.push(Term::new("the candidates of every thinking step", 2, &[s, batch, context, v]));
    e.terms.push(Term::new("the candidates' start noise", 2, &[Figure::new("samples", samples), v]));
    e
}

/// One training step of `batch` windows (the fast backend's workspace, its
/// gradients and AdamW's moments, the dropout masks when `dropout` is on),
/// and the evaluation between steps.
pub fn train(cfg: &ModelConfig, batch: Figure, dropout: bool) -> Estimate {
    let n = Figure::new("block_size", cfg.block_size);
    let mut e = workspace(cfg, batch, n);
    e.task = format!("training on batches of {} x {} characters", batch.value, n.value);
    // the evaluation between steps: the reference forward, or an EBT's thinking
    let eval = match cfg.arch {
        Arch::Ebt => think(cfg, batch, n, cfg.steps, 1),
        _ => forward(cfg, batch, n),
    };
    let shared: Vec<&str> = e.terms.iter().map(|t| t.what).chain([WEIGHTS]).collect();
    e.terms.extend(eval.terms.into_iter().filter(|t| !shared.contains(&t.what)));
    if dropout {
        // one mask per level and one per level's attention, each as large as what it masks
        let Dims { d, h, .. } = dims(cfg);
        let l = Figure::new("2*levels+1", 2 * levels(cfg).value as usize + 1);
        e.terms.push(Term::new("the dropout masks", 2, &[l, batch, n, d]));
        e.terms.push(Term::new("the attention dropout masks", 2, &[levels(cfg), batch, h, n, n]));
    }
    if cfg.arch == Arch::Ebt {
        e.terms.push(Term::new("the replay buffer", 4, &[batch, n, Figure::new("vocab_size", cfg.vocab_size)]));
    }
    e
}

/// The fast backend's preallocated buffers for `batch` windows of
/// `context` (`trainer/src/fast/workspace.rs`, `fast/ebt/tape.rs`): per
/// level a tape of the states, attention and feed-forward, the top's
/// logits, a gradient per chunk of 8 sequences, the weights and moments.
fn workspace(cfg: &ModelConfig, batch: Figure, context: Figure) -> Estimate {
    let Dims { v, d, h, dh, m, params } = dims(cfg);
    let (b, n, l) = (batch, context, levels(cfg));
    let copies = Figure { name: "batch/8+8", value: batch.value.div_ceil(8).saturating_add(8) };
    // attention maps kept per level: NRGPT's probabilities; a GPT layer's
    // scores and probabilities; an EBT layer's for the real and the
    // predicted streams, their tangents and second-order terms
    let maps = match cfg.arch {
        Arch::NrgptFf1 | Arch::NrgptFf2w => 2,
        Arch::Gpt | Arch::GptRec => 3,
        Arch::Ebt => 6,
    };
    Estimate {
        task: String::new(),
        terms: vec![
            Term::new("the gradients (one per chunk of 8 sequences), weights and moments", 1, &[copies, params]),
            Term::new("the attention tape", maps, &[l, b, h, n, n]),
            Term::new("the queries, keys and values tape", 16, &[l, b, n, h, dh]),
            Term::new("the states tape", 24, &[l, b, n, d]),
            Term::new("the feed-forward tape", 8, &[l, b, n, m]),
            Term::new("the logits", 12, &[b, n, v]),
            Term::new("the states and their gradients", 24, &[b, n, d]),
            Term::new("the queries and keys and their gradients", 8, &[b, n, h, dh]),
            Term::new("the feed-forward scratch", 4, &[b, n, m]),
            Term::new("the attention scratch", 2, &[n, n]),
        ]
        .into_iter()
        .chain(overhead(cfg))
        .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_past_a_budget_is_refused_naming_the_figure_and_its_field() {
        // in range and at most a few MB on disk, each past a budget through its block
        let mut heads = ModelConfig::new(Arch::NrgptFf2w, 65, 16, 1024, 4, 32768);
        heads.head_dim = 1;
        let long = ModelConfig::new(Arch::Gpt, 65, 8, 1, 2, 65536);
        let mut ebt = ModelConfig::new(Arch::Ebt, 65, 16, 64, 2, 16384);
        (ebt.head_dim, ebt.layers) = (8, 8);
        for (cfg, budget, field) in [(&heads, PAGE, "block_size=32768"), (&long, NATIVE, "block_size=65536"), (&ebt, PAGE, "block_size=16384")] {
            let err = decode(cfg).check(budget).err().unwrap_or_else(|| panic!("{:?}: {} bytes", cfg.arch, decode(cfg).bytes())).to_string();
            assert!(err.contains(&format!("past the {} memory budget", budget.name)) && err.contains(&format!("driven by {field}")), "{err}");
        }
        // the shipped default's shape decodes in the page with room to spare
        let mut default = ModelConfig::new(Arch::NrgptFf2w, 65, 256, 4, 4, 128);
        default.head_dim = 64;
        assert!(decode(&default).bytes() < PAGE.bytes / 20);
    }

    #[test]
    fn products_saturate_instead_of_wrapping() {
        let mut cfg = ModelConfig::new(Arch::NrgptFf2w, 65, 8192, 1024, 1024, 65536);
        cfg.head_dim = 8192;
        let e = train(&cfg, Figure::new("--batch", usize::MAX), true);
        assert_eq!(e.bytes(), u64::MAX);
        assert!(e.check(NATIVE).is_err());
    }
}
