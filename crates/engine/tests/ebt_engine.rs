//! The engine's incremental EBT decoder (crates/engine/src/ebt_decoder.rs)
//! against the oracle session (crates/core/src/ebt_session.rs): same seed,
//! same candidates, same choice; logits within 1e-3 for every option the
//! page exposes, across window slides, on one-at-a-time and prompt feeding.

#[path = "../../core/tests/models/mod.rs"]
mod models;

use models::{ebt_checkpoint, ebt_config};
use nrgpt_core::ebt::Verify;
use nrgpt_core::ebt_session::EbtSession;
use nrgpt_core::rng::Rng64;
use nrgpt_core::session::{EbtThinkOpts, StepOpts, TokenTrace};
use nrgpt_core::{Activation, Checkpoint, EbtInput, EbtUpdate, ModelConfig, NormKind};
use nrgpt_engine::{Backend, Decoder, DecoderOpts};

fn config(act: Activation, norm: NormKind) -> ModelConfig {
    ebt_config(act, norm, 2)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn assert_same(what: &str, engine: &TokenTrace, oracle: &TokenTrace) {
    assert_eq!(engine.chosen, oracle.chosen, "{what}: chosen candidate");
    assert_eq!(engine.steps_used, oracle.steps_used, "{what}: steps used");
    assert_eq!(engine.candidates.len(), oracle.candidates.len(), "{what}: candidates");
    let d = max_diff(&engine.logits, &oracle.logits);
    let big = oracle.logits.iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!(d < 1e-3, "{what}: logits differ by {d} (largest |logit| {big})");
    for (c, (e, o)) in engine.candidates.iter().zip(&oracle.candidates).enumerate() {
        assert_eq!(e.len(), o.len(), "{what}: candidate {c} thought {} steps in the engine ({e:?}), {} in the oracle ({o:?})", e.len() - 1, o.len() - 1);
        let scale = o.iter().fold(1.0f32, |m, x| m.max(x.abs()));
        let d = max_diff(e, o);
        assert!(d / scale < 1e-4, "{what}: candidate {c}'s energies differ by {d} (scale {scale})");
    }
    assert_eq!(engine.step_logits.len(), oracle.step_logits.len(), "{what}: steps recorded");
    for (s, (e, o)) in engine.step_logits.iter().zip(&oracle.step_logits).enumerate() {
        let d = max_diff(e, o);
        assert!(d < 1e-3, "{what}: step {s}'s logits differ by {d}");
    }
}

fn seq(n: usize, v: usize, seed: u64) -> Vec<u32> {
    let mut r = Rng64::new(seed);
    (0..n).map(|_| r.below(v) as u32).collect()
}

/// The CPU engine (ebt_gpu.rs holds the WGSL one to it).
fn decoder(ck: &Checkpoint) -> Decoder {
    pollster::block_on(Decoder::new(&ck.to_bytes().unwrap(), DecoderOpts { force_cpu: true, ..Default::default() })).unwrap()
}

fn opts(steps: usize, samples: usize, verify: Verify, accept_lower: bool, early_exit: Option<f32>) -> StepOpts {
    StepOpts { steps: Some(steps), early_exit, ebt: EbtThinkOpts { samples, verify, accept_lower, seed: 77, langevin: 0.0 } }
}

/// `o` with Langevin noise of std `langevin` before every step.
fn noisy(mut o: StepOpts, langevin: f32) -> StepOpts {
    o.ebt.langevin = langevin;
    o
}

#[test]
fn incremental_decoder_thinks_as_the_oracle_one_character_at_a_time() {
    let variants = [
        (Activation::Gelu, NormKind::LayerNorm, EbtUpdate::Logits),
        (Activation::Relu, NormKind::RmsNorm, EbtUpdate::Logits),
        (Activation::Gelu, NormKind::LayerNorm, EbtUpdate::Probs),
    ];
    for (act, norm, update) in variants {
        let mut cfg = config(act, norm);
        cfg.ebt_update = update;
        // the probabilities' step with its own input map (the reference's S2 pair)
        cfg.ebt_input = if update == EbtUpdate::Probs { EbtInput::Own } else { EbtInput::Tied };
        // and the reference's clamp on its step (one entry moves by at most 0.3)
        cfg.ebt_clamp = if update == EbtUpdate::Probs { 0.3 } else { 0.0 };
        // The probabilities' step with these random weights (std 0.3) is an
        // expanding map past ~8 steps: at 12 the engine and the oracle agree to
        // 5e-6 for 8 steps, then f32 round-off grows 7x a step (0.005 at step
        // 12). Its early-exit case thinks at most 6 steps.
        let long = if update == EbtUpdate::Probs { 6 } else { 12 };
        // a step of 8 overshoots, so accept-only-lower has steps to refuse
        for (o, a) in [
            (opts(3, 1, Verify::MinEnergy, false, None), 0.5),
            (opts(6, 4, Verify::MinEnergy, false, None), 0.5),
            (opts(6, 4, Verify::MaxGap, true, None), 8.0),
            (opts(long, 3, Verify::MinEnergy, false, Some(0.05)), 0.5),
            (noisy(opts(4, 4, Verify::MinEnergy, false, None), 0.8), 0.5),
        ] {
            let ck = ebt_checkpoint(&cfg, 5, a);
            if cfg.ebt_clamp > 0.0 {
                // the clamp must act here, or the agreement shows nothing about it
                let free = ebt_checkpoint(&ModelConfig { ebt_clamp: 0.0, ..cfg.clone() }, 5, a);
                let first = |ck: &Checkpoint| EbtSession::new(ck).unwrap().push(1, &o).unwrap().logits;
                assert!(max_diff(&first(&ck), &first(&free)) > 1e-3, "{:?}: the clamp changed nothing", o.ebt);
            }
            let (mut engine, mut oracle) = (decoder(&ck), EbtSession::new(&ck).unwrap());
            assert!(matches!(engine.backend(), Backend::Cpu { .. }), "an EBT runs on the CPU engine");
            let (mut not_first, mut stopped_early) = (0, 0);
            // 20 characters through an 8-character window: two slides
            for (i, &t) in seq(20, cfg.vocab_size, 3).iter().enumerate() {
                let e = pollster::block_on(engine.push(t, &o)).unwrap();
                let r = oracle.push(t, &o).unwrap();
                assert_same(&format!("{act:?}/{norm:?}/{update:?} {:?} char {i}", o.ebt), &e, &r);
                not_first += usize::from(r.chosen != 0);
                stopped_early += usize::from(r.steps_used < o.steps.unwrap());
            }
            // the options must have acted, or the agreement shows little
            if o.ebt.samples > 1 {
                assert!(not_first > 0, "{:?}: verification always chose candidate 0", o.ebt);
            }
            if o.early_exit.is_some() || o.ebt.accept_lower {
                assert!(stopped_early > 0, "{:?}: no character stopped early", o.ebt);
            }
        }
    }
}

#[test]
fn a_prompt_fed_at_once_thinks_as_the_oracle_fed_one_by_one() {
    let cfg = config(Activation::Gelu, NormKind::LayerNorm);
    let ck = ebt_checkpoint(&cfg, 11, 0.5);
    let o = opts(4, 4, Verify::MinEnergy, false, None);
    for len in [1, 5, 8, 13] {
        let prompt = seq(len, cfg.vocab_size, 40 + len as u64);
        let mut engine = decoder(&ck);
        let e = pollster::block_on(engine.push_many(&prompt, &o)).unwrap();
        let mut oracle = EbtSession::new(&ck).unwrap();
        oracle.feed(&prompt[..len - 1]).unwrap();
        let r = oracle.push(prompt[len - 1], &o).unwrap();
        assert_same(&format!("prompt of {len}"), &e, &r);
        // and the next character after it
        let e = pollster::block_on(engine.push(2, &o)).unwrap();
        let r = oracle.push(2, &o).unwrap();
        assert_same(&format!("after a prompt of {len}"), &e, &r);
    }
}

#[test]
fn thinking_longer_and_more_candidates_lower_the_chosen_energy() {
    let cfg = config(Activation::Gelu, NormKind::LayerNorm);
    let ck = ebt_checkpoint(&cfg, 21, 0.5);
    let mut engine = decoder(&ck);
    let prompt = seq(6, cfg.vocab_size, 9);
    let final_energy = |engine: &mut Decoder, o: &StepOpts| {
        engine.reset();
        *pollster::block_on(engine.push_many(&prompt, o)).unwrap().energies.last().unwrap()
    };
    let one = final_energy(&mut engine, &opts(1, 1, Verify::MinEnergy, true, None));
    let many = final_energy(&mut engine, &opts(16, 1, Verify::MinEnergy, true, None));
    let best = final_energy(&mut engine, &opts(16, 8, Verify::MinEnergy, true, None));
    assert!(many < one, "16 accepted steps ({many}) should end lower than 1 ({one})");
    assert!(best <= many, "the best of 8 ({best}) is at most candidate 0's energy ({many})");
}

/// The noise acts (every point of every candidate's curve moves off plain
/// descent's, step 0 included: the noise comes before each step) and a std of 0 is plain descent, bit for bit. That it keeps a
/// trained model's candidates apart is the page's browser test, on the shipped EBT.
#[test]
fn langevin_noise_moves_every_candidate_and_zero_noise_is_plain_descent() {
    let cfg = config(Activation::Gelu, NormKind::LayerNorm);
    let ck = ebt_checkpoint(&cfg, 31, 0.5);
    let prompt = seq(6, cfg.vocab_size, 12);
    let think = |o: &StepOpts| pollster::block_on(decoder(&ck).push_many(&prompt, o)).unwrap().candidates;
    let plain = think(&opts(4, 4, Verify::MinEnergy, false, None));
    let langevin = think(&noisy(opts(4, 4, Verify::MinEnergy, false, None), 1.0));
    for (c, (p, l)) in plain.iter().zip(&langevin).enumerate() {
        assert!(p.iter().zip(l).all(|(a, b)| (a - b).abs() > 1e-4), "candidate {c}: noise left a step unmoved: {p:?} vs {l:?}");
    }
    assert_eq!(think(&opts(4, 4, Verify::MinEnergy, false, None)), think(&noisy(opts(4, 4, Verify::MinEnergy, false, None), 0.0)));
}
