//! Quantized checkpoints: the exact bit layout the GPU shaders will read, the
//! rounding error bounds, padding, loading into a working model, and clear
//! errors for damaged files.

mod models;

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use models::{ids, random_model, rel_err, tiny_config, to_vec};
use nrgpt_core::layout::{ParamSpec, WeightLayout};
use nrgpt_core::model::Weights;
use nrgpt_core::format::{dequantize, packed_lens, quantize, Integrity, PackedCheckpoint, PackedTensor, Scheme, BLOCK};
use nrgpt_core::rng::Rng64;
use nrgpt_core::{Arch, Checkpoint, Error, ForwardOpts, ModelConfig, Vocab};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

#[test]
fn int8_bit_layout_by_hand() {
    // max |x| = 127, so scale = 1 and q = round(x)
    let x = [1.0, -1.0, 127.0, -127.0, 5.0, 0.4, -0.6];
    let p = quantize(&x, Scheme::Int8);
    assert_eq!(p.scales, vec![1.0]);
    // one block of 32 bytes = 8 words; byte k of word w is element 4w + k
    // q = [1, -1, 127, -127 | 5, 0, -1, (pad 0)]
    let mut want = vec![0u32; 8];
    want[0] = 0x81_7F_FF_01;
    want[1] = 0x00_FF_00_05;
    assert_eq!(p.words, want, "{:08x?}", p.words);
    assert_eq!(dequantize(&p, x.len(), Scheme::Int8), vec![1.0, -1.0, 127.0, -127.0, 5.0, 0.0, -1.0]);

    // a second block gets its own scale: max 2.54 -> scale 0.02, so 1.0 -> q 50
    let mut y = vec![0.0f32; 40];
    y[32] = -2.54;
    y[33] = 1.0;
    let p = quantize(&y, Scheme::Int8);
    assert_eq!(p.scales.len(), 2);
    assert_eq!(p.scales[0], 0.0, "an all-zero block has scale 0");
    assert!((p.scales[1] as f64 - 0.02).abs() < 1e-8);
    assert_eq!(p.words.len(), 16);
    assert!(p.words[..8].iter().all(|&w| w == 0));
    assert_eq!(p.words[8], 0x00_00_32_81, "{:08x}", p.words[8]);
}

#[test]
fn int4_bit_layout_by_hand() {
    // max |x| = 7, so scale = 1 and q = round(x)
    let x = [7.0, -7.0, 1.0, -1.0, 0.0, 3.0, -3.0, 2.0, 6.6, -2.4];
    let p = quantize(&x, Scheme::Int4);
    assert_eq!(p.scales, vec![1.0]);
    // nibble k (bits 4k..4k+3) of word w is element 8w + k, two's complement:
    // 7=7, -7=9, 1=1, -1=F, 0=0, 3=3, -3=D, 2=2 | 7, -2=E
    let mut want = vec![0u32; 4];
    want[0] = 0x2D30_F197;
    want[1] = 0x0000_00E7;
    assert_eq!(p.words, want, "{:08x?}", p.words);
    assert_eq!(dequantize(&p, x.len(), Scheme::Int4), vec![7.0, -7.0, 1.0, -1.0, 0.0, 3.0, -3.0, 2.0, 7.0, -2.0]);
}

fn random_data(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng64::new(seed);
    // varied magnitudes per block, so the scales differ
    (0..n).map(|i| (rng.normal() * 0.02 * (1.0 + (i / BLOCK % 5) as f64)) as f32).collect()
}

#[test]
fn int_round_trip_error_is_at_most_half_a_step() {
    let x = random_data(1000, 7);
    for scheme in [Scheme::Int8, Scheme::Int4] {
        let p = quantize(&x, scheme);
        let y = dequantize(&p, x.len(), scheme);
        assert_eq!(y.len(), x.len());
        let mut worst = 0.0f64;
        for (i, (&a, &b)) in x.iter().zip(&y).enumerate() {
            let scale = p.scales[i / BLOCK] as f64;
            let err = (a as f64 - b as f64).abs();
            // |x - q * scale| <= scale / 2, up to f32 rounding of x / scale and q * scale
            assert!(err <= scale * 0.5 * (1.0 + 1e-5), "{scheme} element {i}: error {err} > scale/2 = {}", scale / 2.0);
            worst = worst.max(err / scale);
        }
        // the bound is tight: some element is off by nearly half a step
        assert!(worst > 0.4, "{scheme}: worst error only {worst} steps");
        // the largest element of each block is exact up to f32 rounding
        for (b, block) in x.chunks(BLOCK).enumerate() {
            let (i, &m) = block.iter().enumerate().max_by(|a, b| a.1.abs().total_cmp(&b.1.abs())).unwrap();
            assert!((y[b * BLOCK + i] - m).abs() <= m.abs() * 1e-6);
        }
    }
}

#[test]
fn f16_matches_ieee_rounding() {
    let mut x = random_data(997, 3);
    // edges: ties, the subnormal range, overflow, signed zero, the largest finite
    x.extend([
        0.0,
        -0.0,
        1.0 + 1.0 / 2048.0, // exactly halfway: ties to even (down)
        1.0 + 3.0 / 2048.0, // halfway: ties to even (up)
        6.1e-5,
        5.96e-8,
        2.98e-8,
        1e-10,
        -3.0e-6,
        65504.0,
        65520.0, // rounds up to inf
        1e6,
        -1e6,
    ]);
    // and random bit patterns across every exponent f16 can round to (and beyond)
    let mut rng = Rng64::new(99);
    x.extend((0..200_000).map(|_| {
        let bits = rng.next_u64() as u32;
        let exp = 90 + (bits >> 23) % 60; // 2^-37 .. 2^22
        f32::from_bits((bits & 0x807f_ffff) | (exp << 23))
    }));
    let p = quantize(&x, Scheme::F16);
    assert_eq!(p.words.len(), x.len().div_ceil(2));
    assert!(p.scales.is_empty());
    let y = dequantize(&p, x.len(), Scheme::F16);
    // candle (the `half` crate) is the reference conversion
    let r: Vec<f32> =
        Tensor::from_vec(x.clone(), x.len(), &Device::Cpu).unwrap().to_dtype(DType::F16).unwrap().to_dtype(DType::F32).unwrap().to_vec1().unwrap();
    for i in 0..x.len() {
        assert_eq!(y[i].to_bits(), r[i].to_bits(), "element {i}: {} -> {} but half gives {}", x[i], y[i], r[i]);
    }
    // relative error 2^-11 in the normal range (|x| >= 2^-14), absolute 2^-25 below it
    for (&a, &b) in x.iter().zip(&y).filter(|(a, _)| a.abs() <= 65504.0) {
        let rel = (a as f64 - b as f64).abs() / (a.abs() as f64).max(2f64.powi(-14));
        assert!(rel <= 1e-3, "{a} -> {b}: relative error {rel}");
    }
}

#[test]
fn padding_of_a_partial_last_block() {
    let x = random_data(70, 11); // 2 full blocks and 6 elements
    for scheme in [Scheme::Int8, Scheme::Int4] {
        let p = quantize(&x, scheme);
        let (words, scales) = packed_lens(70, scheme);
        assert_eq!((p.words.len(), p.scales.len()), (words, scales));
        assert_eq!(scales, 3);
        assert_eq!(words, 3 * BLOCK * scheme.bits() / 32);
        // the padding is zero codes: the same words as explicit zeros
        let mut padded = x.clone();
        padded.resize(96, 0.0);
        assert_eq!(quantize(&padded, scheme), p);
        let per_word = 32 / scheme.bits();
        let last_used = (70 - 1) / per_word;
        let tail_bits = p.words[last_used] >> (scheme.bits() * (70 % per_word));
        assert_eq!(tail_bits, 0, "{scheme}: padding bits in the last used word");
        assert!(p.words[last_used + 1..].iter().all(|&w| w == 0), "{scheme}: padding words");
        assert_eq!(dequantize(&p, 70, scheme).len(), 70);
    }
    assert_eq!(packed_lens(0, Scheme::Int8), (0, 0));
    assert!(quantize(&[], Scheme::Int4).words.is_empty());
}

fn vocab_for(cfg: &ModelConfig) -> Vocab {
    Vocab::from_chars(('a'..).take(cfg.vocab_size).collect()).unwrap()
}

fn checkpoint(cfg: &ModelConfig, w: Weights) -> Checkpoint {
    Checkpoint { config: cfg.clone(), vocab: vocab_for(cfg), weights: w, extra: Weights::new(), meta: Default::default(), integrity: Integrity::Verified }
}

#[test]
fn quantized_checkpoints_run_close_to_f32() {
    let x = ids(&[1, 4, 2, 9, 0, 3, 7, 7, 5, 10]);
    // (scheme, bound on the logits' relative error). These random models have
    // large weights (std 0.3) that amplify rounding through the descent, so
    // the bounds are loose; the order f32 < f16 < int8 < int4 is checked too.
    let bounds = [(Scheme::F32, 1e-6), (Scheme::F16, 5e-3), (Scheme::Int8, 5e-2), (Scheme::Int4, 0.5)];
    for arch in [Arch::NrgptFf2w, Arch::NrgptFf1, Arch::Gpt, Arch::GptRec] {
        let cfg = tiny_config(arch);
        let (model, w) = random_model(&cfg, 5);
        let want = to_vec(&model.forward(&x, ForwardOpts::default()).unwrap().logits);
        let ck = checkpoint(&cfg, w.clone());
        let mut last_err = 0.0;
        for (scheme, bound) in bounds {
            let bytes = ck.to_quant_bytes(scheme).unwrap();
            let loaded = Checkpoint::from_bytes(&bytes, DType::F64, &Device::Cpu).unwrap();
            assert_eq!(loaded.config, cfg);
            assert_eq!(loaded.vocab, ck.vocab);
            assert!(loaded.extra.is_empty());
            for ParamSpec { name, shape, .. } in WeightLayout::new(&cfg).specs {
                let (a, b) = (to_vec(&w[&name]), to_vec(&loaded.weights[&name]));
                if shape.len() == 1 || scheme == Scheme::F32 {
                    // stored as f32: exact up to the f64 -> f32 cast
                    assert!(a.iter().zip(&b).all(|(a, b)| (*a as f32) as f64 == *b), "{name} changed");
                } else {
                    // the loader dequantizes exactly what quantize() packed
                    let af: Vec<f32> = a.iter().map(|&v| v as f32).collect();
                    let deq: Vec<f64> = dequantize(&quantize(&af, scheme), af.len(), scheme).into_iter().map(f64::from).collect();
                    assert_eq!(deq, b, "{name} at {scheme}");
                }
            }
            let got = to_vec(&loaded.model().unwrap().forward(&x, ForwardOpts::default()).unwrap().logits);
            let err = rel_err(&got, &want);
            eprintln!("{} {scheme}: logits relative error {err:.2e}, {} bytes", arch.name(), bytes.len());
            assert!(err <= bound, "{} {scheme}: logits relative error {err} > {bound}", arch.name());
            assert!(err > last_err, "{} {scheme}: fewer bits but a smaller error {err}", arch.name());
            last_err = err;
        }
    }
}

#[test]
fn packed_view_matches_the_file_and_any_safetensors_reader() {
    let cfg = tiny_config(Arch::NrgptFf2w);
    let (_, w) = random_model(&cfg, 9);
    let ck = checkpoint(&cfg, w.clone());
    for scheme in [Scheme::Int8, Scheme::Int4] {
        let bytes = ck.to_quant_bytes(scheme).unwrap();
        let p = PackedCheckpoint::from_bytes(&bytes).unwrap();
        assert_eq!(p.scheme, scheme);
        assert_eq!(p.tensors.len(), WeightLayout::new(&cfg).specs.len());
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
        let md = header.metadata().clone().unwrap();
        assert_eq!(md["format"], "nrgpt-web/quant/v1");
        assert_eq!(md["quant"], scheme.name());
        assert_eq!(md["block"], "32");
        for (i, ParamSpec { name, shape, .. }) in WeightLayout::new(&cfg).specs.into_iter().enumerate() {
            let data: Vec<f32> = w[&name].to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            match &p.tensors[i] {
                PackedTensor::Quant { shape: s, words, scales } => {
                    assert_eq!(shape.len(), 2, "{name}");
                    assert_eq!(s, &shape);
                    let want = quantize(&data, scheme);
                    assert_eq!((words, scales), (&want.words, &want.scales), "{name}");
                    let q = st.tensor(&format!("{name}.q")).unwrap();
                    assert_eq!((q.dtype(), q.shape()), (Dtype::U32, &[words.len()][..]));
                    let sc = st.tensor(&format!("{name}.scale")).unwrap();
                    assert_eq!((sc.dtype(), sc.shape()), (Dtype::F32, &[scales.len()][..]));
                }
                PackedTensor::F32(v) => {
                    assert_eq!(shape.len(), 1, "{name} should be packed");
                    assert_eq!(v, &data);
                    assert_eq!(st.tensor(&name).unwrap().dtype(), Dtype::F32);
                }
            }
        }
    }
    // f16: the rank-2 weights are F16 tensors of their own shape
    let bytes = ck.to_quant_bytes(Scheme::F16).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor("block.ff.w1").unwrap();
    assert_eq!((t.dtype(), t.shape()), (Dtype::F16, &[cfg.ff_hidden(), cfg.d_model][..]));
    assert_eq!(st.tensor("block.ff.b1").unwrap().dtype(), Dtype::F32);
    // an f32 training checkpoint reads as scheme F32, optimizer state skipped
    let mut train_ck = checkpoint(&cfg, w);
    // the reader takes the whole AdamW state or none of it, each moment shaped as its weight
    for (name, t) in &train_ck.weights {
        for prefix in ["opt.m.", "opt.v."] {
            train_ck.extra.insert(format!("{prefix}{name}"), t.zeros_like().unwrap());
        }
    }
    let p = PackedCheckpoint::from_bytes(&train_ck.to_bytes().unwrap()).unwrap();
    assert_eq!(p.scheme, Scheme::F32);
    assert!(p.tensors.iter().all(|t| matches!(t, PackedTensor::F32(_))));
    assert_eq!(p.tensors.len(), p.layout.specs.len());
    assert!(p.layout.specs.iter().all(|s| s.name != "opt.m.head.w"));
    // to_quant_bytes(F32) is that file without the optimizer state
    let slim = Checkpoint::from_bytes(&train_ck.to_quant_bytes(Scheme::F32).unwrap(), DType::F32, &Device::Cpu).unwrap();
    assert!(slim.extra.is_empty());
}

/// A file's tensors and metadata, edited and written back under a fresh
/// digest (as a writer of such a file would), so the reader's own rules must refuse it.
fn rewrite<'a>(bytes: &'a [u8], edit: impl FnOnce(&mut HashMap<String, String>, &mut Vec<(String, TensorView<'a>)>)) -> Vec<u8> {
    let st = SafeTensors::deserialize(bytes).unwrap();
    let (_, header) = SafeTensors::read_metadata(bytes).unwrap();
    let mut md = header.metadata().clone().unwrap();
    let mut tensors = st.tensors();
    edit(&mut md, &mut tensors);
    nrgpt_core::format::digest::seal(&mut md, &tensors).unwrap();
    safetensors::serialize(tensors, Some(md)).unwrap()
}

fn load_err(bytes: &[u8]) -> Error {
    let e = Checkpoint::from_bytes(bytes, DType::F32, &Device::Cpu).err().expect("a damaged file loaded");
    // the packed reader gives the same answer
    let p = PackedCheckpoint::from_bytes(bytes).expect_err("a damaged file parsed");
    assert_eq!(p.to_string(), e.to_string());
    e
}

#[test]
fn damaged_files_give_clear_errors() {
    let cfg = tiny_config(Arch::NrgptFf2w);
    let (_, w) = random_model(&cfg, 2);
    let good = checkpoint(&cfg, w).to_quant_bytes(Scheme::Int8).unwrap();
    assert!(Checkpoint::from_bytes(&good, DType::F32, &Device::Cpu).is_ok());

    let e = load_err(b"definitely not safetensors");
    assert!(e.to_string().contains("not a safetensors file"), "{e}");

    let e = load_err(&rewrite(&good, |md, _| {
        md.insert("quant".into(), "int3".into());
    }));
    assert!(matches!(&e, Error::UnknownScheme(s) if s == "int3"), "{e}");
    assert!(e.to_string().contains("unknown quantization scheme `int3`"), "{e}");
    assert!("int3".parse::<Scheme>().is_err());

    let e = load_err(&rewrite(&good, |md, _| {
        md.remove("quant");
    }));
    assert!(e.to_string().contains("no `quant` entry"), "{e}");

    let e = load_err(&rewrite(&good, |md, _| {
        md.insert("block".into(), "64".into());
    }));
    assert!(e.to_string().contains("block size `64`"), "{e}");

    let e = load_err(&rewrite(&good, |_, t| t.retain(|(n, _)| n != "head.w.scale")));
    assert!(matches!(&e, Error::MissingWeight(n) if n == "head.w.scale"), "{e}");
    let e = load_err(&rewrite(&good, |_, t| t.retain(|(n, _)| n != "block.attn.wq.q")));
    assert!(e.to_string().contains("`block.attn.wq.q`"), "{e}");

    // a word count that does not fit the shape: tok_emb is [11, 16] = 176 elements, 6 blocks, 48 words
    let short = [0u8; 4 * 47];
    let e = load_err(&rewrite(&good, |_, t| {
        let i = t.iter().position(|(n, _)| n == "tok_emb.q").unwrap();
        t[i].1 = TensorView::new(Dtype::U32, vec![47], &short).unwrap();
    }));
    assert!(matches!(&e, Error::PackedLength { got: 47, want: 48, .. }), "{e}");
    assert!(e.to_string().contains("`tok_emb.q` holds 47 words, but a [11, 16] weight at int8 needs 48"), "{e}");

    // the same file read as int4 has twice the words it should
    let e = load_err(&rewrite(&good, |md, _| {
        md.insert("quant".into(), "int4".into());
    }));
    assert!(matches!(&e, Error::PackedLength { .. }), "{e}");

    let floats = [0u8; 4 * 48];
    let e = load_err(&rewrite(&good, |_, t| {
        let i = t.iter().position(|(n, _)| n == "tok_emb.q").unwrap();
        t[i].1 = TensorView::new(Dtype::F32, vec![48], &floats).unwrap();
    }));
    assert!(matches!(&e, Error::TensorDtype { .. }), "{e}");
    assert!(e.to_string().contains("`tok_emb.q` is stored as F32, expected U32"), "{e}");

    let e = load_err(&rewrite(&good, |_, t| {
        let extra = t.iter().find(|(n, _)| n == "head.b").unwrap().1.clone();
        t.push(("stray".into(), extra));
    }));
    assert!(e.to_string().contains("unexpected tensor `stray`"), "{e}");

    let e = load_err(&rewrite(&good, |md, _| {
        md.insert("format".into(), "nrgpt-web/quant/v9".into());
    }));
    assert!(e.to_string().contains("format `nrgpt-web/quant/v9`"), "{e}");

    // non-finite weights are refused rather than packed into garbage
    let (_, mut w) = random_model(&cfg, 2);
    w.insert("head.w".into(), Tensor::full(f64::NAN, (cfg.vocab_size, cfg.d_model), &Device::Cpu).unwrap());
    let e = checkpoint(&cfg, w).to_quant_bytes(Scheme::Int4).err().unwrap();
    assert!(e.to_string().contains("tensor `head.w` element 0 is NaN: values must be finite"), "{e}");
    let (_, mut w) = random_model(&cfg, 2);
    w.insert("head.w".into(), Tensor::full(1e5f64, (cfg.vocab_size, cfg.d_model), &Device::Cpu).unwrap());
    let e = checkpoint(&cfg, w).to_quant_bytes(Scheme::F16).err().unwrap();
    // beyond the weight bound (1e3), so never beyond f16's 65504 either
    assert!(e.to_string().contains("`head.w` element 0 is 1e5: values must be finite with |x| <= 1e3"), "{e}");
}
