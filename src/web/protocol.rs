//! Messages between the page and the inference worker. Both sides are this
//! crate, so one serde definition is the whole contract; a GPU engine plugs in
//! behind the worker without the page noticing (only `Loaded.backend` changes).
//! A worker hosts sessions (each its own model, sequence and seed; all on one
//! GPU device): every message names its session, 0 when left out (the page).

use serde::{Deserialize, Serialize};
use wasm_bindgen::JsValue;

use nrgpt_core::session::TokenTrace;

/// A message to or from one of the worker's sessions: `{"session": 2, "type": ...}` on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InSession<M> {
    #[serde(default)]
    pub session: u32,
    #[serde(flatten)]
    pub msg: M,
}

/// Page -> worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ToWorker {
    /// Fetch (or take from the Cache API) and parse a checkpoint.
    Load {
        url: String,
        /// Absent from older pages and embedders: let the worker decide.
        #[serde(default)]
        engine: EngineChoice,
    },
    Generate(GenerateRequest),
    /// Stop the running generation after the character in flight.
    Stop,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GenerateRequest {
    /// Identifies the run, so late messages of a stopped run are ignored.
    pub run: u32,
    pub prompt: String,
    pub len: usize,
    pub temperature: f32,
    /// 0 = no top-k cut.
    pub top_k: usize,
    pub seed: u64,
    /// Recursion steps T; None = the checkpoint's.
    pub steps: Option<usize>,
    /// Early exit once |E(t) - E(t-1)| < tol (the incremental engines, GPU and CPU; the CPU reference ignores it).
    #[serde(default)]
    pub early_exit: Option<f32>,
    /// EBT: candidates thought per character, the lowest final energy kept
    /// (Best-of-N); ignored by NRGPT and GPT.
    #[serde(default = "one_candidate")]
    pub candidates: usize,
    /// EBT: Langevin noise std added to each candidate before every thinking
    /// step (0 = plain descent); ignored by NRGPT and GPT.
    #[serde(default)]
    pub langevin: f32,
}

fn one_candidate() -> usize {
    1
}

/// Which engine the page wants, decided on its own thread: only the page
/// sees the adapter's info (wgpu in the worker cannot tell a software GPU).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EngineChoice {
    /// Run the CPU engine, for this reason (shown next to the backend).
    pub cpu_because: Option<String>,
    /// The adapter is a hardware GPU, or the reader asked for WebGPU: an EBT may think in WGSL too.
    pub gpu_trusted: bool,
}

/// What the page needs to know about the loaded checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelInfo {
    pub arch: String,
    pub steps: usize,
    pub block_size: usize,
    pub d_model: usize,
    pub vocab: String,
    pub params: usize,
    /// An EBT's thinking step, as the page writes it (empty for the others).
    pub think_step: String,
    /// e.g. "WebGPU engine" or "CPU engine (wasm)".
    pub backend: String,
    /// Why the CPU engine runs (no adapter, or an EBT on an adapter not known
    /// to be a hardware GPU): the page says so next to the backend.
    pub backend_note: Option<String>,
    /// "unverified: written before checksums" for a file without a digest.
    pub integrity_note: Option<String>,
    pub from_cache: bool,
}

/// One generated character and how it settled.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Token {
    pub run: u32,
    /// Position in the generated text (0-based).
    pub index: usize,
    pub ch: char,
    /// Probability the sampler gave the character that was drawn.
    pub prob: f32,
    pub energies: Vec<f32>,
    pub step_logits: Vec<Vec<f32>>,
    pub proj: Vec<[f32; 2]>,
    pub steps_used: usize,
    /// The steps the run asked for (T or S): `steps_used` is out of these.
    pub steps: usize,
    /// EBT: every candidate's energy per thinking step (empty otherwise);
    /// `energies` and `step_logits` are candidate `chosen`'s.
    pub candidates: Vec<Vec<f32>>,
    pub chosen: usize,
    /// Wall time of this character in the worker (ms).
    pub ms: f64,
}

impl Token {
    pub fn new(run: u32, index: usize, ch: char, prob: f32, steps: usize, tr: TokenTrace, ms: f64) -> Self {
        // `logits` equals the last entry of `step_logits` (same state, same
        // readout), so it is not sent twice.
        Self {
            run,
            index,
            ch,
            prob,
            energies: tr.energies,
            step_logits: tr.step_logits,
            proj: tr.proj,
            steps_used: tr.steps_used,
            steps,
            candidates: tr.candidates,
            chosen: tr.chosen,
            ms,
        }
    }
}

/// Worker -> page.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum FromWorker {
    /// The worker's wasm is initialised and it listens (sent as session 0).
    Ready,
    /// Download progress; `total` is 0 when the server sent no length.
    Progress {
        loaded: f64,
        total: f64,
    },
    /// What the loading does now (parse, engine start-up), after the download.
    Loading {
        phase: String,
    },
    Loaded(ModelInfo),
    /// Prompt characters the model has read of those its window holds
    /// (`skipped` earlier ones fall outside the window and are not read).
    Reading {
        run: u32,
        read: usize,
        total: usize,
        skipped: usize,
    },
    /// The engine changed mid-run (the GPU failed and the CPU engine took over).
    Backend {
        backend: String,
        note: Option<String>,
    },
    Token(Token),
    /// The run ended: `stopped` when the user stopped it.
    Done {
        run: u32,
        chars: usize,
        ms: f64,
        stopped: bool,
    },
    /// A run (`run` > 0) or the loading (`run` = 0) failed.
    Error {
        run: u32,
        message: String,
    },
}

pub fn to_js<T: Serialize>(v: &T) -> JsValue {
    // Maps as plain objects so the page can read them in devtools too.
    let ser = serde_wasm_bindgen::Serializer::new().serialize_maps_as_objects(true);
    v.serialize(&ser).unwrap_or_else(|e| JsValue::from_str(&format!("serialisation failed: {e}")))
}

pub fn from_js<T: for<'de> Deserialize<'de>>(v: JsValue) -> Result<T, String> {
    serde_wasm_bindgen::from_value(v).map_err(|e| format!("bad message: {e}"))
}
