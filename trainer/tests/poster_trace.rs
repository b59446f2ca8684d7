//! `trainer sample --trace`: the widget's poster is the run `sample` prints
//! (same text for the seed) with what the settling animation draws per
//! character, for NRGPT (energies and leaders per step), an EBT (every
//! candidate's curve, the kept one named) and a GPT (leaders per layer, no energy).

use std::process::Command;

use serde_json::Value;

fn sample_with_trace(ckpt: &str, extra: &[&str]) -> (String, Value) {
    let dir = std::env::temp_dir().join(format!("poster-trace-{}-{}", std::process::id(), ckpt.replace('/', "_")));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("trace.json");
    let out = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(["--json", "sample", "--ckpt", ckpt, "--prompt", "ROMEO:", "--len", "24", "--top-k", "20", "--seed", "3"])
        .args(extra)
        .arg("--trace")
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
    (printed["text"].as_str().unwrap().to_string(), trace)
}

fn chars(trace: &Value) -> &Vec<Value> {
    trace["chars"].as_array().unwrap()
}

#[test]
fn nrgpt_trace_is_the_printed_run_with_its_descent() {
    let (text, trace) = sample_with_trace("www/models/default.safetensors", &[]);
    assert_eq!(trace["text"], text.as_str());
    assert_eq!(chars(&trace).iter().map(|c| c["c"].as_str().unwrap()).collect::<String>(), text);
    let t = trace["steps"].as_u64().unwrap() as usize;
    assert_eq!(t, 4, "the shipped default descends T = 4 steps");
    for c in chars(&trace) {
        assert_eq!(c["e"].as_array().unwrap().len(), t + 1, "an energy per step t = 0..T: {c}");
        let top = c["top"].as_array().unwrap();
        assert_eq!(top.len(), t + 1);
        assert!(top.iter().all(|s| s.as_str().unwrap().chars().count() == 3), "three leaders per step: {c}");
        assert!(c.get("cand").is_none() && c.get("kept").is_none(), "no candidates outside an EBT");
    }
    // the descent lowers the energy of each character (the stable eta's guarantee)
    let e = chars(&trace)[5]["e"].as_array().unwrap();
    assert!(e.last().unwrap().as_f64() < e[0].as_f64(), "{e:?}");
}

#[test]
fn ebt_trace_has_every_candidates_curve() {
    let (text, trace) = sample_with_trace("www/models/ebt.safetensors", &["--steps", "3", "--samples", "2", "--verify", "min"]);
    assert_eq!(trace["text"], text.as_str());
    assert_eq!(trace["candidates"], 2);
    for c in chars(&trace) {
        let cand = c["cand"].as_array().unwrap();
        assert_eq!(cand.len(), 2, "{c}");
        assert!(cand.iter().all(|k| k.as_array().unwrap().len() == 4), "S = 3 steps: 4 energies each: {c}");
        let kept = c["kept"].as_u64().unwrap() as usize;
        let last = |k: &Value| k.as_array().unwrap().last().unwrap().as_f64().unwrap();
        assert!(cand.iter().all(|k| last(&cand[kept]) <= last(k)), "min verification keeps the lowest final energy: {c}");
    }
}

#[test]
fn gpt_trace_has_leaders_per_layer_and_no_energy() {
    let (text, trace) = sample_with_trace("www/models/gpt.safetensors", &[]);
    assert_eq!(trace["text"], text.as_str());
    for c in chars(&trace) {
        assert!(c["e"].as_array().unwrap().is_empty(), "a GPT has no energy: {c}");
        assert_eq!(c["top"].as_array().unwrap().len(), 3, "the embedding and two layers: {c}");
    }
}
