//! The one weight layout every path reads: each parameter's name, shape,
//! initialisation, offset in a flat buffer and whether a quantized file packs
//! it. The candle model, the checkpoint format, the CPU decoder, the GPU
//! packer and the fast trainer all index weights through [`WeightLayout`];
//! no other module spells a weight's name.

use crate::{Arch, BlockNorm, EbtInput, EtaInit, EtaKind, GptBlock, ModelConfig};

/// How a parameter starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    Normal(f64),
    Const(f64),
    Identity,
}

/// One parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
    /// First element in the concatenation of all parameters in layout order.
    pub offset: usize,
}

impl ParamSpec {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether a quantized file stores it packed: the rank-2 weights. The
    /// rank-1 ones (gammas, biases, alpha, log_c, ff_scale) stay f32: they
    /// cost nothing and are the most sensitive to rounding.
    pub fn quantized(&self) -> bool {
        self.shape.len() == 2
    }
}

/// Indices of the shared NRGPT block's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct NrgptIdx {
    /// The block norm's learnable gain (`BlockNorm::Gain`), or its
    /// learnable bias with the gain fixed at 1 (`BlockNorm::Bare`).
    pub gamma: Option<usize>,
    pub norm_bias: Option<usize>,
    pub wq: usize,
    pub wk: usize,
    pub alpha: usize,
    pub w1: usize,
    pub b1: usize,
    /// Only nrgpt-ff2w.
    pub w2: Option<usize>,
    pub b2: Option<usize>,
    pub ff_scale: usize,
    /// Stable eta: log c.
    pub log_c: Option<usize>,
    /// Free eta: the D x D matrix.
    pub eta_w: Option<usize>,
}

/// Indices of one pre-norm GPT layer's parameters.
#[derive(Debug, Clone, PartialEq)]
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

/// Indices of EBT's parameters beyond the embeddings and the energy head.
#[derive(Debug, Clone, PartialEq)]
pub struct EbtIdx {
    /// The energy network's pre-norm layers (same parameters as a GPT layer).
    pub layers: Vec<GptIdx>,
    /// The thinking step size `a = max(exp(log_a), 1e-4)`.
    pub log_a: usize,
    /// The candidate's input map (V, D): the token embedding `tok`, or its
    /// own `ebt.in_emb` ([`crate::EbtInput`]).
    pub input: usize,
}

/// The parameters between the embedding and the readout.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// The one shared NRGPT block.
    Nrgpt(NrgptIdx),
    /// One entry per distinct GPT layer (gpt: `steps` layers; gpt-rec: one, applied `steps` times).
    Gpt(Vec<GptIdx>),
    /// EBT: `head` is its energy head (D -> 1), not a readout.
    Ebt(EbtIdx),
}

/// Every parameter a config needs, in a fixed order, with typed indices.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightLayout {
    pub specs: Vec<ParamSpec>,
    pub tok: usize,
    pub pos: usize,
    pub out_gamma: usize,
    pub head_w: usize,
    pub head_b: usize,
    pub body: Body,
}

/// Appends specs and hands out their indices.
struct Builder(Vec<ParamSpec>);

impl Builder {
    fn add(&mut self, name: String, shape: Vec<usize>, init: Init) -> usize {
        let offset = self.0.last().map_or(0, |p| p.offset + p.numel());
        self.0.push(ParamSpec { name, shape, init, offset });
        self.0.len() - 1
    }
}

/// Initial `log a` of EBT's thinking step (a = e^4.6, about 100).
pub const EBT_LOG_A0: f64 = 4.6;

/// The training-state tensor of an EBT run's replay buffer of final
/// candidates, (k, block, vocab): beside the optimizer moments, not a weight.
pub const EBT_REPLAY: &str = "ebt.replay";
/// The largest |logit| a replay buffer may hold.
pub const MAX_ABS_REPLAY: f32 = 1e6;

/// Layer `l` of a stack that applies `applied` layers in sequence (GPT's
/// layers and EBT's energy network share the parameters).
fn gpt_layer(b: &mut Builder, cfg: &ModelConfig, l: usize, std: f64, applied: usize) -> GptIdx {
    let (d, m, hd) = (cfg.d_model, cfg.ff_hidden(), cfg.n_head * cfg.head_dim);
    // GPT-2's scaled init of the projections that write into the residual
    // stream; the reference's parallel baseline starts every matrix alike
    let proj_std = match cfg.gpt_block {
        GptBlock::Sequential => std / (2.0 * applied as f64).sqrt(),
        GptBlock::Parallel => std,
    };
    let mut p = |s: &str, shape: Vec<usize>, init| b.add(format!("layers.{l}.{s}"), shape, init);
    GptIdx {
        ln1: p("ln1", vec![d], Init::Const(1.0)),
        wq: p("attn.wq", vec![hd, d], Init::Normal(std)),
        wk: p("attn.wk", vec![hd, d], Init::Normal(std)),
        wv: p("attn.wv", vec![hd, d], Init::Normal(std)),
        wo: p("attn.wo", vec![d, hd], Init::Normal(proj_std)),
        ln2: p("ln2", vec![d], Init::Const(1.0)),
        w1: p("mlp.w1", vec![m, d], Init::Normal(std)),
        b1: p("mlp.b1", vec![m], Init::Const(0.0)),
        w2: p("mlp.w2", vec![d, m], Init::Normal(proj_std)),
        b2: p("mlp.b2", vec![d], Init::Const(0.0)),
    }
}

impl WeightLayout {
    pub fn new(cfg: &ModelConfig) -> Self {
        let (v, d, m, hd) = (cfg.vocab_size, cfg.d_model, cfg.ff_hidden(), cfg.n_head * cfg.head_dim);
        let std = 0.02;
        let mut b = Builder(Vec::new());
        // EBT's head maps the normalised state to one energy, the others' to V logits
        let head_out = if cfg.arch == Arch::Ebt { 1 } else { v };
        let tok = b.add("tok_emb".into(), vec![v, d], Init::Normal(std));
        let pos = b.add("pos_emb".into(), vec![cfg.block_size, d], Init::Normal(std));
        let out_gamma = b.add("out_norm.gamma".into(), vec![d], Init::Const(1.0));
        let head_w = b.add("head.w".into(), vec![head_out, d], Init::Normal(std));
        let head_b = b.add("head.b".into(), vec![head_out], Init::Const(0.0));
        let body = match cfg.arch {
            Arch::NrgptFf2w | Arch::NrgptFf1 => {
                let ff2w = cfg.arch == Arch::NrgptFf2w;
                let eta_init = match cfg.eta_init {
                    EtaInit::Identity => Init::Identity,
                    EtaInit::Normal => Init::Normal(std),
                };
                let mut n = |s: &str, shape: Vec<usize>, init| b.add(format!("block.{s}"), shape, init);
                Body::Nrgpt(NrgptIdx {
                    gamma: (cfg.block_norm == BlockNorm::Gain).then(|| n("norm.gamma", vec![d], Init::Const(1.0))),
                    norm_bias: (cfg.block_norm == BlockNorm::Bare).then(|| n("norm.bias", vec![d], Init::Const(0.0))),
                    wq: n("attn.wq", vec![hd, d], Init::Normal(std)),
                    wk: n("attn.wk", vec![hd, d], Init::Normal(std)),
                    alpha: n("attn.alpha", vec![cfg.n_head], Init::Const(1.0)),
                    w1: n("ff.w1", vec![m, d], Init::Normal(std)),
                    b1: n("ff.b1", vec![m], Init::Const(0.0)),
                    w2: ff2w.then(|| n("ff.w2", vec![d, m], Init::Normal(std))),
                    b2: ff2w.then(|| n("ff.b2", vec![d], Init::Const(0.0))),
                    ff_scale: n("ff_scale", vec![1], Init::Const(1.0)),
                    log_c: (cfg.eta == EtaKind::Stable).then(|| n("eta.log_c", vec![1], Init::Const(0.0))),
                    eta_w: (cfg.eta == EtaKind::Free).then(|| n("eta.w", vec![d, d], eta_init)),
                })
            }
            Arch::Gpt | Arch::GptRec => {
                let layers = if cfg.arch == Arch::Gpt { cfg.steps } else { 1 };
                Body::Gpt((0..layers).map(|l| gpt_layer(&mut b, cfg, l, std, cfg.steps)).collect())
            }
            Arch::Ebt => {
                let layers = (0..cfg.layers).map(|l| gpt_layer(&mut b, cfg, l, std, cfg.layers)).collect();
                // a = e^{log_a}: a 65-way softmax has a tiny input gradient, so the step starts large
                let log_a = b.add("ebt.log_a".into(), vec![1], Init::Const(EBT_LOG_A0));
                let input = match cfg.ebt_input {
                    EbtInput::Tied => tok,
                    EbtInput::Own => b.add("ebt.in_emb".into(), vec![v, d], Init::Normal(std)),
                };
                Body::Ebt(EbtIdx { layers, log_a, input })
            }
        };
        Self { specs: b.0, tok, pos, out_gamma, head_w, head_b, body }
    }

    pub fn name(&self, i: usize) -> &str {
        &self.specs[i].name
    }

    /// Parameters in total.
    pub fn num_params(&self) -> usize {
        self.specs.iter().map(ParamSpec::numel).sum()
    }

    /// The NRGPT block's indices, if this is an NRGPT layout.
    pub fn nrgpt(&self) -> Option<&NrgptIdx> {
        match &self.body {
            Body::Nrgpt(ix) => Some(ix),
            _ => None,
        }
    }

    /// The GPT layers' indices, if this is a GPT layout.
    pub fn gpt(&self) -> Option<&[GptIdx]> {
        match &self.body {
            Body::Gpt(ix) => Some(ix),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bare block norm swaps the gain for a bias of the same size.
    #[test]
    fn bare_block_norm_has_a_bias_and_no_gain() {
        let mut cfg = ModelConfig::new(Arch::NrgptFf2w, 65, 32, 4, 3, 16);
        let gain = WeightLayout::new(&cfg);
        cfg.block_norm = BlockNorm::Bare;
        let bare = WeightLayout::new(&cfg);
        let (g, b) = (gain.nrgpt().unwrap(), bare.nrgpt().unwrap());
        assert!(g.gamma.is_some() && g.norm_bias.is_none() && b.gamma.is_none());
        let bias = &bare.specs[b.norm_bias.unwrap()];
        assert_eq!((bias.name.as_str(), &bias.shape, bias.init), ("block.norm.bias", &vec![32], Init::Const(0.0)));
        assert_eq!(gain.num_params(), bare.num_params());
    }

    /// The parallel GPT block starts every matrix N(0, 0.02) as the reference
    /// does; ours scales the residual projections by 1/sqrt(2 x layers applied).
    #[test]
    fn parallel_gpt_block_has_the_plain_init() {
        let mut cfg = ModelConfig::new(Arch::GptRec, 65, 32, 4, 8, 16);
        let seq = WeightLayout::new(&cfg);
        cfg.gpt_block = GptBlock::Parallel;
        let par = WeightLayout::new(&cfg);
        let wo = |l: &WeightLayout| l.specs[l.gpt().unwrap()[0].wo].init;
        let w2 = |l: &WeightLayout| l.specs[l.gpt().unwrap()[0].w2].init;
        assert_eq!((wo(&seq), w2(&seq)), (Init::Normal(0.005), Init::Normal(0.005)));
        assert_eq!((wo(&par), w2(&par)), (Init::Normal(0.02), Init::Normal(0.02)));
        assert_eq!(seq.num_params(), par.num_params(), "same weights, another wiring");
    }

    /// The free eta's init follows `eta_init`; the names and shapes do not
    /// change, so a checkpoint does not say how it started.
    #[test]
    fn free_eta_starts_as_configured() {
        let mut cfg = ModelConfig::new(Arch::NrgptFf2w, 65, 32, 4, 3, 16);
        cfg.eta = EtaKind::Free;
        let ident = WeightLayout::new(&cfg);
        cfg.eta_init = EtaInit::Normal;
        let normal = WeightLayout::new(&cfg);
        let w = |l: &WeightLayout| l.specs[l.nrgpt().unwrap().eta_w.unwrap()].clone();
        assert_eq!(w(&ident).init, Init::Identity);
        assert_eq!(w(&normal).init, Init::Normal(0.02));
        assert_eq!((w(&ident).name, w(&ident).shape), (w(&normal).name, w(&normal).shape));
    }

    #[test]
    fn offsets_are_contiguous_and_indices_name_their_parameters() {
        for arch in [Arch::NrgptFf2w, Arch::NrgptFf1, Arch::Gpt, Arch::GptRec, Arch::Ebt] {
            let mut cfg = ModelConfig::new(arch, 65, 32, 4, 3, 16);
            cfg.layers = 2;
            let lay = WeightLayout::new(&cfg);
            let mut at = 0;
            for s in &lay.specs {
                assert_eq!(s.offset, at, "{arch:?} {}", s.name);
                at += s.numel();
            }
            assert_eq!(at, lay.num_params());
            assert_eq!(lay.name(lay.head_w), "head.w");
            assert_eq!(lay.specs[lay.tok].shape, vec![65, 32]);
            if arch != Arch::Ebt {
                assert_eq!(lay.specs[lay.head_w].shape, vec![65, 32]);
            }
            match &lay.body {
                Body::Nrgpt(ix) => {
                    assert_eq!(lay.name(ix.wq), "block.attn.wq");
                    assert_eq!(ix.w2.is_some(), arch == Arch::NrgptFf2w);
                    assert!(ix.log_c.is_some() && ix.eta_w.is_none());
                }
                Body::Gpt(layers) => {
                    assert_eq!(layers.len(), if arch == Arch::Gpt { 3 } else { 1 });
                    assert_eq!(lay.name(layers[0].wo), "layers.0.attn.wo");
                }
                Body::Ebt(ix) => {
                    assert_eq!(ix.layers.len(), 2);
                    assert_eq!(lay.specs[lay.head_w].shape, vec![1, 32], "one energy, not V logits");
                }
            }
            let names: std::collections::HashSet<_> = lay.specs.iter().map(|s| &s.name).collect();
            assert_eq!(names.len(), lay.specs.len(), "names are unique");
        }
    }
}
