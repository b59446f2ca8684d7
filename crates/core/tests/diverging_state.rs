//! A descent that goes NaN stops the generation with a message instead of
//! sampling from garbage (the reader refuses such files; this is the guard
//! behind it, for a state that diverges at run time).

mod common;

use nrgpt_core::session::{Session, StepOpts};
use nrgpt_core::{Arch, Error};

#[test]
fn a_nan_state_stops_the_session_with_a_message() {
    let mut ck = common::f32_checkpoint(Arch::NrgptFf2w);
    let mut s = Session::new(&ck).unwrap();
    s.push(3, &StepOpts::default()).unwrap().check_finite().unwrap();
    // weights past the reader, as a diverged state would be
    let w = ck.weights["block.ff_scale"].clone();
    ck.weights.insert("block.ff_scale".into(), (w * f64::INFINITY).unwrap());
    let mut s = Session::new(&ck).unwrap();
    match s.push(3, &StepOpts::default()) {
        Err(Error::NonFinite(m)) => assert!(m.contains("generation stopped"), "{m}"),
        Err(e) => panic!("another error: {e}"),
        Ok(t) => panic!("a non-finite state was returned as a trace: {:?}", &t.logits[..3]),
    }
}
