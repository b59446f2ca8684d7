//! The parameters as flat f32 vectors in `param_specs` order, with the index
//! of each named one, and the conversions to and from candle `Weights` (so
//! checkpoints, init and evaluation stay those of the core crate).

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use nrgpt_web::model::{param_specs, Weights};
use nrgpt_web::{Arch, EtaKind, ModelConfig};

/// Where each parameter lives in the `Vec<Vec<f32>>`.
#[derive(Debug, Clone)]
pub struct Layout {
    pub names: Vec<String>,
    pub shapes: Vec<Vec<usize>>,
    pub tok: usize,
    pub pos: usize,
    pub out_gamma: usize,
    pub head_w: usize,
    pub head_b: usize,
    pub body: Body,
}

/// The parameters between the embedding and the readout.
#[derive(Debug, Clone)]
pub enum Body {
    /// The one shared NRGPT block.
    Nrgpt(NrgptIdx),
    /// One entry per distinct GPT layer (gpt: `steps` layers; gpt-rec: one, applied `steps` times).
    Gpt(Vec<GptIdx>),
}

#[derive(Debug, Clone)]
pub struct NrgptIdx {
    pub gamma: usize,
    pub wq: usize,
    pub wk: usize,
    pub alpha: usize,
    pub w1: usize,
    pub b1: usize,
    /// Only nrgpt-ff2w.
    pub w2: Option<usize>,
    pub b2: Option<usize>,
    pub ff_scale: usize,
    /// Stable eta: log c; free eta: the D x D matrix.
    pub log_c: Option<usize>,
    pub eta_w: Option<usize>,
}

/// One pre-norm GPT layer (src/gpt.rs).
#[derive(Debug, Clone)]
pub struct GptIdx {
    pub ln1: usize,
    pub wq: usize,
    pub wk: usize,
    pub wv: usize,
    pub wo: usize,
    pub ln2: usize,
    pub w1: usize,
    pub b1: usize,
    pub w2: usize,
    pub b2: usize,
}

impl Layout {
    pub fn new(cfg: &ModelConfig) -> Result<Self> {
        let specs = param_specs(cfg);
        let names: Vec<String> = specs.iter().map(|s| s.0.clone()).collect();
        let shapes = specs.iter().map(|s| s.1.clone()).collect();
        let find = |n: &str| names.iter().position(|x| x == n);
        let get = |n: &str| find(n).with_context(|| format!("no parameter {n}"));
        let body = match cfg.arch {
            Arch::NrgptFf2w | Arch::NrgptFf1 => Body::Nrgpt(NrgptIdx {
                gamma: get("block.norm.gamma")?,
                wq: get("block.attn.wq")?,
                wk: get("block.attn.wk")?,
                alpha: get("block.attn.alpha")?,
                w1: get("block.ff.w1")?,
                b1: get("block.ff.b1")?,
                w2: if cfg.arch == Arch::NrgptFf2w { Some(get("block.ff.w2")?) } else { None },
                b2: if cfg.arch == Arch::NrgptFf2w { Some(get("block.ff.b2")?) } else { None },
                ff_scale: get("block.ff_scale")?,
                log_c: if cfg.eta == EtaKind::Stable { Some(get("block.eta.log_c")?) } else { None },
                eta_w: if cfg.eta == EtaKind::Free { Some(get("block.eta.w")?) } else { None },
            }),
            Arch::Gpt | Arch::GptRec => {
                let layers = if cfg.arch == Arch::Gpt { cfg.steps } else { 1 };
                let layer = |l: usize| -> Result<GptIdx> {
                    let g = |s: &str| get(&format!("layers.{l}.{s}"));
                    Ok(GptIdx {
                        ln1: g("ln1")?,
                        wq: g("attn.wq")?,
                        wk: g("attn.wk")?,
                        wv: g("attn.wv")?,
                        wo: g("attn.wo")?,
                        ln2: g("ln2")?,
                        w1: g("mlp.w1")?,
                        b1: g("mlp.b1")?,
                        w2: g("mlp.w2")?,
                        b2: g("mlp.b2")?,
                    })
                };
                Body::Gpt((0..layers).map(layer).collect::<Result<_>>()?)
            }
        };
        Ok(Self {
            tok: get("tok_emb")?,
            pos: get("pos_emb")?,
            out_gamma: get("out_norm.gamma")?,
            head_w: get("head.w")?,
            head_b: get("head.b")?,
            body,
            names,
            shapes,
        })
    }

    /// The NRGPT block's indices (the NRGPT forward and backward only run for NRGPT).
    pub fn nrgpt(&self) -> &NrgptIdx {
        match &self.body {
            Body::Nrgpt(ix) => ix,
            Body::Gpt(_) => unreachable!("an NRGPT pass on a GPT layout"),
        }
    }

    /// The GPT layers' indices.
    pub fn gpt(&self) -> &[GptIdx] {
        match &self.body {
            Body::Gpt(ix) => ix,
            Body::Nrgpt(_) => unreachable!("a GPT pass on an NRGPT layout"),
        }
    }

    /// Zeroed buffers of every parameter's size.
    pub fn zeros(&self) -> Vec<Vec<f32>> {
        self.shapes.iter().map(|s| vec![0.0; s.iter().product()]).collect()
    }

    /// `out[i]` = the transpose of every weight matrix the gemms read as `W^T`
    /// (all rank-2 parameters but the embeddings), so every gemm's right-hand
    /// side is row-major and packs with plain copies; empty for the others.
    pub fn transposes(&self, params: &[Vec<f32>], out: &mut Vec<Vec<f32>>) {
        out.resize(params.len(), Vec::new());
        for (i, (p, shape)) in params.iter().zip(&self.shapes).enumerate() {
            if shape.len() != 2 || i == self.tok || i == self.pos {
                continue;
            }
            let (rows, cols) = (shape[0], shape[1]);
            let o = &mut out[i];
            o.resize(rows * cols, 0.0);
            for r in 0..rows {
                for c in 0..cols {
                    o[c * rows + r] = p[r * cols + c];
                }
            }
        }
    }

    /// Reads `prefix + name` for every parameter from `w` (any float dtype) as f32.
    pub fn from_weights(&self, w: &Weights, prefix: &str) -> Result<Vec<Vec<f32>>> {
        self.names
            .iter()
            .zip(&self.shapes)
            .map(|(n, shape)| {
                let key = format!("{prefix}{n}");
                let t = w.get(&key).with_context(|| format!("missing tensor `{key}`"))?;
                if t.dims() != shape.as_slice() {
                    bail!("`{key}` has shape {:?}, expected {shape:?}", t.dims());
                }
                Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
            })
            .collect()
    }

    /// The buffers as f32 tensors named `prefix + name`.
    pub fn to_weights(&self, bufs: &[Vec<f32>], prefix: &str) -> Result<Weights> {
        let mut w = Weights::new();
        for ((n, shape), b) in self.names.iter().zip(&self.shapes).zip(bufs) {
            w.insert(format!("{prefix}{n}"), Tensor::from_slice(b, shape.as_slice(), &Device::Cpu)?);
        }
        Ok(w)
    }
}
