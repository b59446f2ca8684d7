//! Model hyper-parameters, stored as JSON in every checkpoint's metadata.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Which model family a checkpoint holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arch {
    /// NRGPT, feed-forward energy `-g^T (W2 s(W1 g + b1) + b2)`.
    NrgptFf2w,
    /// NRGPT, feed-forward energy `-|| s(W g + b) ||^2`.
    NrgptFf1,
    /// Standard GPT: `steps` distinct pre-norm layers.
    Gpt,
    /// Recurrent GPT: one pre-norm layer applied `steps` times.
    GptRec,
    /// Energy-Based Transformer: `layers` pre-norm layers score a candidate
    /// prediction, refined by `steps` descent steps on its energy.
    Ebt,
}

impl Arch {
    pub fn is_nrgpt(self) -> bool {
        matches!(self, Arch::NrgptFf2w | Arch::NrgptFf1)
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::NrgptFf2w => "nrgpt-ff2w",
            Arch::NrgptFf1 => "nrgpt-ff1",
            Arch::Gpt => "gpt",
            Arch::GptRec => "gpt-rec",
            Arch::Ebt => "ebt",
        }
    }
}

impl std::str::FromStr for Arch {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "nrgpt-ff2w" => Ok(Arch::NrgptFf2w),
            "nrgpt-ff1" => Ok(Arch::NrgptFf1),
            "gpt" => Ok(Arch::Gpt),
            "gpt-rec" => Ok(Arch::GptRec),
            "ebt" => Ok(Arch::Ebt),
            _ => Err(Error::Config(format!("unknown model `{s}` (expected nrgpt-ff2w, nrgpt-ff1, gpt, gpt-rec or ebt)"))),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NormKind {
    LayerNorm,
    RmsNorm,
}

/// How the energy gradient is turned into a state update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EtaKind {
    /// `eta = c * diag(gamma)`: energy provably non-increasing (Prop 2.1).
    Stable,
    /// A learned full D x D matrix (the reference code's `proj`).
    Free,
}

impl EtaKind {
    pub fn name(self) -> &'static str {
        match self {
            EtaKind::Stable => "stable",
            EtaKind::Free => "free",
        }
    }
}

/// What the NRGPT block norm learns (the output norm always has a gain).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockNorm {
    /// A learnable gain gamma, no bias (ours): the stable step is c diag(gamma).
    #[default]
    Gain,
    /// A fixed gain of 1 and a learnable bias (the reference's `BareLayerNorm`):
    /// the stable step is then c I, still a descent (J_N = M, symmetric PSD).
    Bare,
}

impl BlockNorm {
    pub fn name(self) -> &'static str {
        match self {
            BlockNorm::Gain => "gain",
            BlockNorm::Bare => "bare",
        }
    }
}

/// How a free step-size matrix starts (the stable step has no matrix).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EtaInit {
    /// The identity: the first steps are plain gradient steps (ours).
    #[default]
    Identity,
    /// N(0, 0.02), as the reference's `proj` (a `Linear(D, D)` under GPT init):
    /// the descent starts nearly switched off and learns its own map.
    Normal,
}

impl EtaInit {
    pub fn name(self) -> &'static str {
        match self {
            EtaInit::Identity => "identity",
            EtaInit::Normal => "normal",
        }
    }
}

/// How a GPT baseline's layer combines its attention and MLP branches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GptBlock {
    /// x + Attn(N1(x)), then + MLP(N2(.)) of that sum, GPT-2's init (ours).
    #[default]
    Sequential,
    /// The reference's `Block_parallel` (its `GPT_Rec_parallel` baseline):
    /// x + Attn(N1(x)) + MLP(N2(x)), both branches read the same x; every
    /// matrix starts N(0, 0.02) as in its `_init_weights` (no GPT-2 scaling
    /// of the residual projections).
    Parallel,
}

impl GptBlock {
    pub fn name(self) -> &'static str {
        match self {
            GptBlock::Sequential => "sequential",
            GptBlock::Parallel => "parallel",
        }
    }
}

/// What an EBT thinking step moves, and along which gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EbtUpdate {
    /// `z <- z - a dE/dz`, through softmax's Jacobian (ours): the start
    /// noise stays in z unless the gradient cancels it.
    #[default]
    Logits,
    /// `z <- softmax(z) - a dE/dy`, y = softmax(z): the reference's
    /// `normalize_initial_condition` (alexiglad/EBT, model/nlp/ebt.py takes
    /// the gradient with respect to the probabilities and steps from them),
    /// so any start is squashed into the simplex before the first step.
    Probs,
}

impl EbtUpdate {
    /// One thinking step of one candidate row, in f32: `z <- z - a g`
    /// (logits) or `z <- y - a g` (probs), with `y = softmax(z)` and `g` the
    /// gradient this update takes (dE/dz or dE/dy), each entry of g first
    /// clamped to [-bound, bound] ([`ModelConfig::ebt_grad_bound`]). Every
    /// f32 path steps here; the oracle writes it in tensors and the WGSL in `ebt_think.wgsl`.
    pub fn step_row(self, z: &mut [f32], y: &[f32], g: &[f32], a: f32, bound: f32) {
        let g = g.iter().map(|g| g.clamp(-bound, bound));
        match self {
            EbtUpdate::Logits => z.iter_mut().zip(g).for_each(|(z, g)| *z -= a * g),
            EbtUpdate::Probs => z.iter_mut().zip(y.iter().zip(g)).for_each(|(z, (y, g))| *z = y - a * g),
        }
    }
}

/// How an EBT candidate's probabilities enter its energy network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EbtInput {
    /// `e = softmax(z)^T Emb`, the token embedding (ours; the reference's
    /// `vocab_to_embed_uses_prob_dist`).
    #[default]
    Tied,
    /// `e = softmax(z)^T W_in`, a V x D map of its own: the reference's
    /// default `vocab_to_embed = Linear(V, D)`, which its S2 script uses.
    Own,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Activation {
    /// Exact (erf) GELU.
    Gelu,
    Relu,
}

fn one() -> usize {
    1
}

fn one_f64() -> f64 {
    1.0
}

/// Serde skips a field at its default, so a config without the newer
/// options serialises exactly as before they existed.
fn is_default<T: Default + PartialEq>(t: &T) -> bool {
    *t == T::default()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub d_model: usize,
    pub n_head: usize,
    /// Width of each head's query/key map; `J_h = Wk_h^T Wq_h` has rank `head_dim`.
    pub head_dim: usize,
    /// Recursion steps T (NRGPT, gpt-rec), layers L (gpt) or thinking steps S (ebt).
    pub steps: usize,
    /// Layers of EBT's energy network (the other models ignore it).
    #[serde(default = "one")]
    pub layers: usize,
    /// Standard deviation of EBT's initial candidate logits z(0) (0: start from the uniform distribution).
    #[serde(default = "one_f64")]
    pub ebt_noise: f64,
    /// What EBT's thinking step moves (logits, or the probabilities).
    #[serde(default, skip_serializing_if = "is_default")]
    pub ebt_update: EbtUpdate,
    /// How EBT's candidate enters its energy network.
    #[serde(default, skip_serializing_if = "is_default")]
    pub ebt_input: EbtInput,
    /// The reference's `clamp_futures_grad`: one thinking step moves a
    /// candidate entry by at most this much (0: no clamp).
    #[serde(default, skip_serializing_if = "is_default")]
    pub ebt_clamp: f64,
    pub block_size: usize,
    /// Hidden width of the feed-forward energy / MLP is `ff_mult * d_model`.
    pub ff_mult: usize,
    pub norm: NormKind,
    pub eta: EtaKind,
    pub activation: Activation,
    pub eps: f64,
    /// NRGPT's attention inverse temperature beta; `None`: 1/sqrt(head_dim)
    /// (ours). The reference uses 1 (its `C**-0.5` is commented out). Fixed,
    /// not learned: `(J, alpha) -> (c J, alpha / c)` with `beta -> beta / c`
    /// leaves the gradient unchanged, so a learned beta only re-scales J's
    /// learning rate.
    #[serde(default, skip_serializing_if = "is_default")]
    pub attn_beta: Option<f64>,
    /// NRGPT's attention mask includes the diagonal (B <= A, as the reference
    /// for Shakespeare); otherwise strict (B < A, ours). The gradient stays
    /// exact: it gains the self term `- alpha_h p_AA J_h g_A`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub attn_diag: bool,
    /// How a free eta matrix starts.
    #[serde(default, skip_serializing_if = "is_default")]
    pub eta_init: EtaInit,
    /// What the NRGPT block norm learns.
    #[serde(default, skip_serializing_if = "is_default")]
    pub block_norm: BlockNorm,
    /// How a GPT baseline's layer combines its branches.
    #[serde(default, skip_serializing_if = "is_default")]
    pub gpt_block: GptBlock,
}

impl ModelConfig {
    /// A config with the usual defaults (head_dim = d/heads, 4x feed-forward).
    pub fn new(arch: Arch, vocab_size: usize, d_model: usize, n_head: usize, steps: usize, block_size: usize) -> Self {
        Self {
            arch,
            vocab_size,
            d_model,
            n_head,
            head_dim: d_model / n_head.max(1),
            steps,
            layers: 1,
            ebt_noise: 1.0,
            ebt_update: EbtUpdate::Logits,
            ebt_input: EbtInput::Tied,
            ebt_clamp: 0.0,
            block_size,
            ff_mult: 4,
            norm: NormKind::LayerNorm,
            eta: EtaKind::Stable,
            activation: Activation::Gelu,
            eps: 1e-5,
            attn_beta: None,
            attn_diag: false,
            eta_init: EtaInit::Identity,
            block_norm: BlockNorm::Gain,
            gpt_block: GptBlock::Sequential,
        }
    }

    /// The largest |g| a thinking step with step size `a` (the learned one,
    /// before any per-token jitter, as the reference's `self.alpha`) takes:
    /// `ebt_clamp / a`, so no entry moves by more than `ebt_clamp`; infinite without a clamp.
    pub fn ebt_grad_bound(&self, a: f32) -> f32 {
        if self.ebt_clamp > 0.0 {
            (self.ebt_clamp / a as f64) as f32
        } else {
            f32::INFINITY
        }
    }

    /// The attention inverse temperature: `attn_beta`, else 1/sqrt(head_dim).
    pub fn beta(&self) -> f64 {
        self.attn_beta.unwrap_or_else(|| 1.0 / (self.head_dim as f64).sqrt())
    }

    pub fn ff_hidden(&self) -> usize {
        self.ff_mult * self.d_model
    }

    /// Every field in its range and the parameter count in bounds
    /// ([`crate::bounds`]); the layout may only be built after this.
    pub fn validate(&self) -> Result<()> {
        crate::bounds::check_config(self)
    }
}
