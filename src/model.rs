//! The whole model in one place: embeddings, a body (NRGPT descent or GPT
//! layers) and the readout, built from a flat name -> tensor map that the
//! trainer, the checkpoint loader and the engine share.

use std::collections::BTreeMap;

use candle_core::{DType, Device, Tensor, D};

use crate::energy::{AttnEnergy, FfEnergy};
use crate::gpt::GptLayer;
use crate::linear::linear;
use crate::norm::norm;
use crate::nrgpt::{Eta, NrgptBlock};
use crate::rng::Rng64;
use crate::{Arch, EtaKind, Error, ModelConfig, Result};

/// Parameters by name, in a stable order.
pub type Weights = BTreeMap<String, Tensor>;

/// How a parameter starts.
#[derive(Debug, Clone, Copy)]
pub enum Init {
    Normal(f64),
    Const(f64),
    Identity,
}

/// Every parameter the config needs: name, shape, init. The single source of
/// truth for names and shapes (init, loading and export all read it).
pub fn param_specs(cfg: &ModelConfig) -> Vec<(String, Vec<usize>, Init)> {
    let (v, d, m, hd) = (cfg.vocab_size, cfg.d_model, cfg.ff_hidden(), cfg.n_head * cfg.head_dim);
    let std = 0.02;
    let mut p = vec![
        ("tok_emb".to_string(), vec![v, d], Init::Normal(std)),
        ("pos_emb".to_string(), vec![cfg.block_size, d], Init::Normal(std)),
        ("out_norm.gamma".to_string(), vec![d], Init::Const(1.0)),
        ("head.w".to_string(), vec![v, d], Init::Normal(std)),
        ("head.b".to_string(), vec![v], Init::Const(0.0)),
    ];
    let mut add = |n: String, s: Vec<usize>, i: Init| p.push((n, s, i));
    match cfg.arch {
        Arch::NrgptFf2w | Arch::NrgptFf1 => {
            add("block.norm.gamma".into(), vec![d], Init::Const(1.0));
            add("block.attn.wq".into(), vec![hd, d], Init::Normal(std));
            add("block.attn.wk".into(), vec![hd, d], Init::Normal(std));
            add("block.attn.alpha".into(), vec![cfg.n_head], Init::Const(1.0));
            add("block.ff.w1".into(), vec![m, d], Init::Normal(std));
            add("block.ff.b1".into(), vec![m], Init::Const(0.0));
            if cfg.arch == Arch::NrgptFf2w {
                add("block.ff.w2".into(), vec![d, m], Init::Normal(std));
                add("block.ff.b2".into(), vec![d], Init::Const(0.0));
            }
            add("block.ff_scale".into(), vec![1], Init::Const(1.0));
            match cfg.eta {
                EtaKind::Stable => add("block.eta.log_c".into(), vec![1], Init::Const(0.0)),
                EtaKind::Free => add("block.eta.w".into(), vec![d, d], Init::Identity),
            }
        }
        Arch::Gpt | Arch::GptRec => {
            let layers = if cfg.arch == Arch::Gpt { cfg.steps } else { 1 };
            // GPT-2's scaled init of the projections that write into the residual stream.
            let proj_std = std / (2.0 * cfg.steps as f64).sqrt();
            for l in 0..layers {
                let n = |s: &str| format!("layers.{l}.{s}");
                add(n("ln1"), vec![d], Init::Const(1.0));
                add(n("attn.wq"), vec![hd, d], Init::Normal(std));
                add(n("attn.wk"), vec![hd, d], Init::Normal(std));
                add(n("attn.wv"), vec![hd, d], Init::Normal(std));
                add(n("attn.wo"), vec![d, hd], Init::Normal(proj_std));
                add(n("ln2"), vec![d], Init::Const(1.0));
                add(n("mlp.w1"), vec![m, d], Init::Normal(std));
                add(n("mlp.b1"), vec![m], Init::Const(0.0));
                add(n("mlp.w2"), vec![d, m], Init::Normal(proj_std));
                add(n("mlp.b2"), vec![d], Init::Const(0.0));
            }
        }
    }
    p
}

/// Fresh weights for `cfg`, deterministic in `seed`.
pub fn init_weights(cfg: &ModelConfig, seed: u64, dtype: DType, dev: &Device) -> Result<Weights> {
    cfg.validate()?;
    let mut rng = Rng64::new(seed);
    let mut w = Weights::new();
    for (name, shape, init) in param_specs(cfg) {
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
    param_specs(cfg).iter().map(|(_, s, _)| s.iter().product::<usize>()).sum()
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
}

pub struct Forward {
    /// (B, n, V)
    pub logits: Tensor,
    /// (T+1, B, n): E_A(t) for t = 0..T (NRGPT only, when recorded).
    pub energies: Option<Tensor>,
    /// x(t) for t = 0..T, each (B, n, D), when recorded.
    pub states: Vec<Tensor>,
}

enum Body {
    Nrgpt(NrgptBlock),
    Gpt(Vec<GptLayer>),
}

pub struct Model {
    pub cfg: ModelConfig,
    tok_emb: Tensor,
    pos_emb: Tensor,
    out_gamma: Tensor,
    head_w: Tensor,
    head_b: Tensor,
    body: Body,
}

impl Model {
    /// Builds the model from `w`, checking every name and shape.
    pub fn new(cfg: &ModelConfig, w: &Weights) -> Result<Self> {
        cfg.validate()?;
        for (name, shape, _) in param_specs(cfg) {
            let t = w.get(&name).ok_or_else(|| Error::MissingWeight(name.clone()))?;
            if t.dims() != shape.as_slice() {
                return Err(Error::WeightShape { name, got: t.dims().to_vec(), want: shape });
            }
        }
        let get = |n: &str| w[n].clone();
        let body = if cfg.arch.is_nrgpt() {
            let ff = if cfg.arch == Arch::NrgptFf2w {
                FfEnergy::Ff2w { w1: get("block.ff.w1"), b1: get("block.ff.b1"), w2: get("block.ff.w2"), b2: get("block.ff.b2") }
            } else {
                FfEnergy::Ff1 { w: get("block.ff.w1"), b: get("block.ff.b1") }
            };
            let eta = match cfg.eta {
                EtaKind::Stable => Eta::Stable { log_c: get("block.eta.log_c") },
                EtaKind::Free => Eta::Free { w: get("block.eta.w") },
            };
            Body::Nrgpt(NrgptBlock {
                norm: cfg.norm,
                eps: cfg.eps,
                gamma: get("block.norm.gamma"),
                attn: AttnEnergy { wq: get("block.attn.wq"), wk: get("block.attn.wk"), alpha: get("block.attn.alpha"), n_head: cfg.n_head },
                ff,
                ff_scale: get("block.ff_scale"),
                eta,
                act: cfg.activation,
            })
        } else {
            let layers = if cfg.arch == Arch::Gpt { cfg.steps } else { 1 };
            Body::Gpt(
                (0..layers)
                    .map(|l| {
                        let n = |s: &str| get(&format!("layers.{l}.{s}"));
                        GptLayer {
                            norm: cfg.norm,
                            eps: cfg.eps,
                            n_head: cfg.n_head,
                            ln1: n("ln1"),
                            wq: n("attn.wq"),
                            wk: n("attn.wk"),
                            wv: n("attn.wv"),
                            wo: n("attn.wo"),
                            ln2: n("ln2"),
                            w1: n("mlp.w1"),
                            b1: n("mlp.b1"),
                            w2: n("mlp.w2"),
                            b2: n("mlp.b2"),
                            act: cfg.activation,
                        }
                    })
                    .collect(),
            )
        };
        Ok(Self {
            cfg: cfg.clone(),
            tok_emb: get("tok_emb"),
            pos_emb: get("pos_emb"),
            out_gamma: get("out_norm.gamma"),
            head_w: get("head.w"),
            head_b: get("head.b"),
            body,
        })
    }

    pub fn dtype(&self) -> DType {
        self.tok_emb.dtype()
    }

    pub fn device(&self) -> &Device {
        self.tok_emb.device()
    }

    pub fn nrgpt_block(&self) -> Option<&NrgptBlock> {
        match &self.body {
            Body::Nrgpt(b) => Some(b),
            Body::Gpt(_) => None,
        }
    }

    /// x(0) = token embedding + position embedding, (B, n, D).
    pub fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, n) = ids.dims2()?;
        if n > self.cfg.block_size {
            return Err(Error::Config(format!("sequence of {n} exceeds the block size {}", self.cfg.block_size)));
        }
        let tok = self.tok_emb.index_select(&ids.flatten_all()?, 0)?.reshape((b, n, self.cfg.d_model))?;
        Ok(tok.broadcast_add(&self.pos_emb.narrow(0, 0, n)?)?)
    }

    /// logits = W_out N_out(x) + b
    pub fn readout(&self, x: &Tensor) -> Result<Tensor> {
        let g = norm(self.cfg.norm, x, &self.out_gamma, self.cfg.eps)?.g;
        Ok(linear(&g, &self.head_w, Some(&self.head_b))?)
    }

    /// ids: (B, n) u32 token ids.
    pub fn forward(&self, ids: &Tensor, opts: ForwardOpts) -> Result<Forward> {
        let ForwardOpts { steps, record, mut dropout } = opts;
        let steps = steps.unwrap_or(self.cfg.steps);
        let mut x = self.embed(ids)?;
        let (shape, dtype, dev) = (x.dims().to_vec(), x.dtype(), x.device().clone());
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
            Body::Nrgpt(block) => {
                for _ in 0..steps {
                    if record {
                        states.push(x.clone());
                    }
                    let out = block.step(&x, record, drop()?.as_ref())?;
                    energies.extend(out.energy);
                    x = out.x_next;
                }
                if record {
                    let g = block.normed(&x)?;
                    energies.extend(block.energy_grad(&g, true)?.energy);
                }
            }
            Body::Gpt(layers) => {
                let n_apply = if self.cfg.arch == Arch::Gpt { layers.len() } else { steps };
                for i in 0..n_apply {
                    if record {
                        states.push(x.clone());
                    }
                    let layer = &layers[i.min(layers.len() - 1)];
                    let (m1, m2) = (drop()?, drop()?);
                    x = layer.forward(&x, m1.as_ref(), m2.as_ref())?;
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
    let v = logits.dim(D::Minus1)?;
    let logits = logits.reshape(((), v))?;
    let targets = targets.flatten_all()?;
    let (_, lse) = crate::energy::softmax_lse(&logits)?;
    let picked = logits.gather(&targets.unsqueeze(1)?, 1)?.squeeze(1)?;
    Ok((lse - picked)?.mean_all()?)
}
