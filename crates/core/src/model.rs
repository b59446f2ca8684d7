//! The whole model in one place: embeddings, a body (NRGPT descent or GPT
//! layers) and the readout, built from a flat name -> tensor map whose names
//! and shapes come from [`crate::layout`].

use std::collections::BTreeMap;

use candle_core::{DType, Device, Tensor, D};

use crate::energy::{AttnEnergy, FfEnergy};
use crate::layout::{Body, Init, ParamSpec, WeightLayout};
use crate::gpt::{GptLayer, LayerDrops};
use crate::linear::linear;
use crate::norm::norm;
use crate::nrgpt::{Eta, NrgptBlock};
use crate::rng::Rng64;
use crate::{Arch, Error, ModelConfig, Result};

/// Parameters by name, in a stable order.
pub type Weights = BTreeMap<String, Tensor>;

/// Every parameter of `lay` is in `w` with its shape.
pub fn check_weights(lay: &WeightLayout, w: &Weights) -> Result<()> {
    for ParamSpec { name, shape, .. } in &lay.specs {
        let t = w.get(name).ok_or_else(|| Error::MissingWeight(name.clone()))?;
        if t.dims() != shape.as_slice() {
            return Err(Error::WeightShape { name: name.clone(), got: t.dims().to_vec(), want: shape.clone() });
        }
    }
    Ok(())
}

/// Fresh weights for `cfg`, deterministic in `seed`.
pub fn init_weights(cfg: &ModelConfig, seed: u64, dtype: DType, dev: &Device) -> Result<Weights> {
    cfg.validate()?;
    let mut rng = Rng64::new(seed);
    let mut w = Weights::new();
    for ParamSpec { name, shape, init, .. } in WeightLayout::new(cfg).specs {
        let numel: usize = shape.iter().product();
        let data: Vec<f64> = match init {
            Init::Normal(std) => (0..numel).map(|_| rng.normal() * std).collect(),
            Init::Const(c) => vec![c; numel],
            Init::Identity => (0..numel).map(|i| if i / shape[1] == i % shape[1] { 1.0 } else { 0.0 }).collect(),
        };
        w.insert(name, Tensor::from_vec(data, shape, dev)?.to_dtype(dtype)?);
    }
    Ok(w)
}

pub fn num_params(cfg: &ModelConfig) -> usize {
    WeightLayout::new(cfg).num_params()
}

/// Inverted dropout with our own deterministic RNG, so a resumed run draws
/// exactly the masks an unbroken run would have.
pub struct Dropout {
    pub p: f64,
    pub rng: Rng64,
}

impl Dropout {
    pub fn mask(&mut self, shape: &[usize], dtype: DType, dev: &Device) -> Result<Option<Tensor>> {
        if self.p <= 0.0 {
            return Ok(None);
        }
        let keep = 1.0 / (1.0 - self.p);
        let n: usize = shape.iter().product();
        let m: Vec<f32> = (0..n).map(|_| if self.rng.uniform() < self.p { 0.0 } else { keep as f32 }).collect();
        Ok(Some(Tensor::from_vec(m, shape, dev)?.to_dtype(dtype)?))
    }
}

#[derive(Default)]
pub struct ForwardOpts<'a> {
    /// Recursion steps T to run (NRGPT, gpt-rec); default: the config's.
    pub steps: Option<usize>,
    /// Record per-token energies E_A(t) and states x_A(t), t = 0..T.
    pub record: bool,
    pub dropout: Option<&'a mut Dropout>,
    /// Dropout on the attention probabilities, one (B, H, n, n) mask per
    /// step or applied layer from its own stream (so residual-dropout runs
    /// draw as before).
    pub attn_dropout: Option<&'a mut Dropout>,
}

pub struct Forward {
    /// (B, n, V)
    pub logits: Tensor,
    /// (T+1, B, n): E_A(t) for t = 0..T (NRGPT only, when recorded).
    pub energies: Option<Tensor>,
    /// x(t) for t = 0..T, each (B, n, D), when recorded.
    pub states: Vec<Tensor>,
}

enum ModelBody {
    Nrgpt(NrgptBlock),
    Gpt(Vec<GptLayer>),
}

/// What every model has around its body: the embeddings, and a head on the
/// normalised output (V logits; one energy for EBT).
pub struct Ends {
    pub tok_emb: Tensor,
    pub pos_emb: Tensor,
    pub out_gamma: Tensor,
    pub head_w: Tensor,
    pub head_b: Tensor,
}

impl Ends {
    pub fn from_layout(lay: &WeightLayout, get: impl Fn(usize) -> Tensor) -> Self {
        Self { tok_emb: get(lay.tok), pos_emb: get(lay.pos), out_gamma: get(lay.out_gamma), head_w: get(lay.head_w), head_b: get(lay.head_b) }
    }

    /// Token embedding + position embedding of `ids` (B, n): (B, n, D).
    pub fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, n) = ids.dims2()?;
        let block = self.pos_emb.dim(0)?;
        if n > block {
            return Err(Error::Config(format!("sequence of {n} exceeds the block size {block}")));
        }
        let d = self.tok_emb.dim(1)?;
        let tok = self.tok_emb.index_select(&ids.flatten_all()?, 0)?.reshape((b, n, d))?;
        Ok(tok.broadcast_add(&self.pos_emb.narrow(0, 0, n)?)?)
    }
}

pub struct Model {
    pub cfg: ModelConfig,
    ends: Ends,
    body: ModelBody,
}

impl Model {
    /// Builds the model from `w`, checking every name and shape.
    pub fn new(cfg: &ModelConfig, w: &Weights) -> Result<Self> {
        cfg.validate()?;
        let lay = WeightLayout::new(cfg);
        check_weights(&lay, w)?;
        let get = |i: usize| w[lay.name(i)].clone();
        let body = match &lay.body {
            Body::Nrgpt(ix) => {
                let ff = match (ix.w2, ix.b2) {
                    (Some(w2), Some(b2)) => FfEnergy::Ff2w { w1: get(ix.w1), b1: get(ix.b1), w2: get(w2), b2: get(b2) },
                    _ => FfEnergy::Ff1 { w: get(ix.w1), b: get(ix.b1) },
                };
                let eta = match (ix.log_c, ix.eta_w) {
                    (Some(log_c), _) => Eta::Stable { log_c: get(log_c) },
                    (None, Some(w)) => Eta::Free { w: get(w) },
                    (None, None) => unreachable!("an NRGPT layout has a step size"),
                };
                ModelBody::Nrgpt(NrgptBlock {
                    norm: cfg.norm,
                    eps: cfg.eps,
                    // the bare norm's gain is the constant 1, not a parameter
                    gamma: match ix.gamma {
                        Some(i) => get(i),
                        None => Tensor::ones(cfg.d_model, get(lay.tok).dtype(), get(lay.tok).device())?,
                    },
                    norm_bias: ix.norm_bias.map(get),
                    attn: AttnEnergy { wq: get(ix.wq), wk: get(ix.wk), alpha: get(ix.alpha), n_head: cfg.n_head, beta: cfg.beta(), diag: cfg.attn_diag },
                    ff,
                    ff_scale: get(ix.ff_scale),
                    eta,
                    act: cfg.activation,
                })
            }
            Body::Gpt(layers) => ModelBody::Gpt(layers.iter().map(|ix| GptLayer::from_layout(cfg, ix, get)).collect()),
            Body::Ebt(_) => return Err(Error::Config("an EBT predicts by thinking: load it with `ebt::Ebt::new`, not `Model::new`".into())),
        };
        Ok(Self { cfg: cfg.clone(), ends: Ends::from_layout(&lay, get), body })
    }

    pub fn dtype(&self) -> DType {
        self.ends.tok_emb.dtype()
    }

    pub fn device(&self) -> &Device {
        self.ends.tok_emb.device()
    }

    pub fn nrgpt_block(&self) -> Option<&NrgptBlock> {
        match &self.body {
            ModelBody::Nrgpt(b) => Some(b),
            ModelBody::Gpt(_) => None,
        }
    }

    /// x(0) = token embedding + position embedding, (B, n, D).
    pub fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        self.ends.embed(ids)
    }

    /// logits = W_out N_out(x) + b
    pub fn readout(&self, x: &Tensor) -> Result<Tensor> {
        let g = norm(self.cfg.norm, x, &self.ends.out_gamma, self.cfg.eps)?.g;
        Ok(linear(&g, &self.ends.head_w, Some(&self.ends.head_b))?)
    }

    /// ids: (B, n) u32 token ids.
    pub fn forward(&self, ids: &Tensor, opts: ForwardOpts) -> Result<Forward> {
        let ForwardOpts { steps, record, mut dropout, mut attn_dropout } = opts;
        let steps = steps.unwrap_or(self.cfg.steps);
        let mut x = self.embed(ids)?;
        let (shape, dtype, dev) = (x.dims().to_vec(), x.dtype(), x.device().clone());
        // the attention masks' shape (B, H, n, n)
        let attn_shape = [shape[0], self.cfg.n_head, shape[1], shape[1]];
        let attn_dev = dev.clone();
        let mut attn_drop = move || -> Result<Option<Tensor>> {
            match attn_dropout.as_deref_mut() {
                Some(d) => d.mask(&attn_shape, dtype, &attn_dev),
                None => Ok(None),
            }
        };
        let mut drop = move || -> Result<Option<Tensor>> {
            match dropout.as_deref_mut() {
                Some(d) => d.mask(&shape, dtype, &dev),
                None => Ok(None),
            }
        };
        if let Some(m) = drop()? {
            x = (x * m)?;
        }
        let mut states = Vec::new();
        let mut energies = Vec::new();
        match &self.body {
            ModelBody::Nrgpt(block) => {
                for _ in 0..steps {
                    if record {
                        states.push(x.clone());
                    }
                    let attn_mask = attn_drop()?;
                    let out = block.step(&x, record, drop()?.as_ref(), attn_mask.as_ref())?;
                    energies.extend(out.energy);
                    x = out.x_next;
                }
                if record {
                    let g = block.normed(&x)?;
                    energies.extend(block.energy_grad(&g, true)?.energy);
                }
            }
            ModelBody::Gpt(layers) => {
                let n_apply = if self.cfg.arch == Arch::Gpt { layers.len() } else { steps };
                for i in 0..n_apply {
                    if record {
                        states.push(x.clone());
                    }
                    let layer = &layers[i.min(layers.len() - 1)];
                    let (m1, m2) = (drop()?, drop()?);
                    let probs = attn_drop()?;
                    x = layer.forward(&x, LayerDrops { attn: m1.as_ref(), mlp: m2.as_ref(), probs: probs.as_ref() })?;
                }
            }
        }
        if record {
            states.push(x.clone());
        }
        let energies = if energies.is_empty() { None } else { Some(Tensor::stack(&energies, 0)?) };
        Ok(Forward { logits: self.readout(&x)?, energies, states })
    }
}

/// Mean next-token cross-entropy (nats), logits (B, n, V), targets (B, n) u32.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    Ok(char_cross_entropy(logits, targets)?.mean_all()?)
}

/// The mean cross-entropy against the truth smoothed by `ls` (weight 1 - ls
/// on it, ls spread evenly over the vocabulary):
/// (1 - ls) CE + ls (lse - mean_v logit).
pub fn smoothed_cross_entropy(logits: &Tensor, targets: &Tensor, ls: f64) -> Result<Tensor> {
    if ls == 0.0 {
        return cross_entropy(logits, targets);
    }
    let v = logits.dim(D::Minus1)?;
    let flat = logits.reshape(((), v))?;
    let (_, lse) = crate::ops::softmax_lse(&flat)?;
    let uniform = (lse - flat.mean(D::Minus1)?)?.mean_all()?;
    Ok(((cross_entropy(logits, targets)? * (1.0 - ls))? + (uniform * ls)?)?)
}

/// Each character's cross-entropy, flat (B * n).
pub fn char_cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let v = logits.dim(D::Minus1)?;
    let logits = logits.reshape(((), v))?;
    let targets = targets.flatten_all()?;
    let (_, lse) = crate::ops::softmax_lse(&logits)?;
    let picked = logits.gather(&targets.unsqueeze(1)?, 1)?.squeeze(1)?;
    Ok((lse - picked)?)
}
