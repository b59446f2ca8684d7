//! EBT thinking in WGSL: the GPU twin of [`crate::ebt_decoder::EbtDecoder`].
//! Two pipelines: `ebt_append.wgsl` runs the real stream for a new token and
//! keeps each layer's keys and values on the GPU; `ebt_think.wgsl` takes one
//! thinking step of every candidate (one workgroup each), the stopping rule
//! inside the shader. A character is one submission: its appends, then the
//! S + 1 thinking dispatches, then one read-back of every candidate's z and
//! energies, which the CPU turns into the trace by the shared `trace_of`.

use std::collections::BTreeMap;

use wgpu::util::DeviceExt;

use nrgpt_core::ebt::MIN_STEP;
use nrgpt_core::ebt_session::{candidate_noise, langevin_noise, trace_of, CandidateThought, RISE_TOL};
use nrgpt_core::format::PackedCheckpoint;
use nrgpt_core::layout::{Body, EbtIdx};
use nrgpt_core::session::{EbtThinkOpts, TokenTrace};
use nrgpt_core::{Activation, EbtUpdate, Error, ModelConfig, NormKind, Result};

use crate::gpu_shared::{constants_source, job_entry, pack, read_back, storage_entry, GpuDevice};

/// The most threads per workgroup.
const MAX_WG: usize = 256;

/// Threads per workgroup: no wider than the widest row a kernel spreads over
/// its threads (idle threads still pay at every barrier on a software
/// adapter), and a power of two for the reductions.
fn workgroup_size(cfg: &ModelConfig, qd: usize) -> usize {
    let widest = [cfg.d_model, qd, cfg.ff_hidden(), cfg.vocab_size, cfg.n_head * (cfg.block_size + 2)].into_iter().max().unwrap_or(1);
    widest.next_power_of_two().clamp(32, MAX_WG)
}

const EBT_COMMON: &str = include_str!("../../../shaders/ebt_common.wgsl");
const REDUCE: &str = include_str!("../../../shaders/reduce.wgsl");
const ACT: &str = include_str!("../../../shaders/act.wgsl");
const EBT_NORM: &str = include_str!("../../../shaders/ebt_norm.wgsl");
const EBT_LAYER: &str = include_str!("../../../shaders/ebt_layer.wgsl");
const EBT_GRAD: &str = include_str!("../../../shaders/ebt_grad.wgsl");
const EBT_APPEND: &str = include_str!("../../../shaders/ebt_append.wgsl");
const EBT_THINK: &str = include_str!("../../../shaders/ebt_think.wgsl");

/// The bind-group layout of `shaders/ebt_common.wgsl`, binding for binding
/// (both EBT kernels bind the same buffers).
fn bind_group_layout(device: &wgpu::Device) -> wgpu::BindGroupLayout {
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("ebt"),
        entries: &[
            // job: uniform Job, one 256-byte slot per dispatch of a submission
            job_entry(std::mem::size_of::<Job>() as u64),
            storage_entry(1, true),  // words
            storage_entry(2, true),  // fvec
            storage_entry(3, false), // kv
            storage_entry(4, false), // cand
            storage_entry(5, false), // scr
        ],
    })
}

/// One dispatch (`Job` in shaders/ebt_common.wgsl).
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Job {
    pos: u32,
    token: u32,
    step: u32,
    steps: u32,
    tol: f32,
    accept_lower: u32,
    cand_len: u32,
    _pad: u32,
}

/// Bytes between job slots (WebGPU's minimum uniform offset alignment).
const JOB_SLOT: usize = 256;

/// A candidate's verdict after its z and energies in `cand`: DONE, KEPT, BAD.
const VERDICT: usize = 3;

/// Named regions laid end to end; returns the total length.
fn regions(consts: &mut BTreeMap<String, String>, start: usize, parts: &[(&str, usize)]) -> usize {
    let mut at = start;
    for (name, len) in parts {
        consts.insert(name.to_string(), format!("{at}u"));
        at += len;
    }
    at
}

/// The per-workgroup scratch (`scr`): shared rows, then each layer's kept
/// activations (offsets `L_*` within a layer of `S_LAYER` floats). Returns its length.
fn scratch_layout(cfg: &ModelConfig, qd: usize, consts: &mut BTreeMap<String, String>) -> usize {
    let (d, v, m, h) = (cfg.d_model, cfg.vocab_size, cfg.ff_hidden(), cfg.n_head);
    let pr = h * (cfg.block_size + 1);
    let layer = regions(
        consts,
        0,
        &[
            ("L_N1_XH", d),
            ("L_N1_RS", 1),
            ("L_N1_G", d),
            ("L_Q", qd),
            ("L_KS", qd),
            ("L_VS", qd),
            ("L_PR", pr),
            ("L_N2_XH", d),
            ("L_N2_RS", 1),
            ("L_N2_G", d),
            ("L_DS", m),
        ],
    );
    let shared = regions(
        consts,
        0,
        &[
            ("S_Y", v),
            ("S_G", v),
            ("S_P", d),
            ("S_ATT", qd),
            ("S_TMP", d),
            ("S_DELTA", d),
            ("S_D1", d),
            ("S_DA", qd),
            ("S_DQ", qd),
            ("S_DK", qd),
            ("S_DV", qd),
            ("S_DH1", m),
            ("S_SV", m),
            ("S_DSB", pr),
            ("S_NO_XH", d),
            ("S_NO_RS", 1),
            ("S_NO_G", d),
        ],
    );
    consts.insert("S_LAYERS".into(), format!("{shared}u"));
    consts.insert("S_LAYER".into(), format!("{layer}u"));
    let total = shared + cfg.layers * layer;
    consts.insert("SCR_LEN".into(), format!("{total}u"));
    total
}

/// The stride between layers of offsets packed layer after layer
/// (`per_layer` items each, from `at[skip]` on); Err when the layers differ in size.
fn layer_stride(at: &[usize], skip: usize, per_layer: usize, layers: usize, what: &str) -> Result<usize> {
    let stride = if layers > 1 { at[skip + per_layer] - at[skip] } else { 0 };
    for l in 0..layers {
        for k in 0..per_layer {
            if at[skip + l * per_layer + k] != at[skip + k] + l * stride {
                return Err(Error::Checkpoint(format!("layer {l}'s {what} are not laid out like layer 0's")));
            }
        }
    }
    Ok(stride)
}

/// The uploaded weights and every generated constant of the two kernels.
struct Program {
    words: Vec<u32>,
    fvec: Vec<f32>,
    decoder: &'static str,
    consts: BTreeMap<String, String>,
    scr_len: usize,
    /// Query/key/value width (heads x head width).
    qd: usize,
}

fn program(file: &PackedCheckpoint, ix: &EbtIdx) -> Result<Program> {
    let (cfg, lay) = (&file.config, &file.layout);
    let w: Vec<Vec<f32>> = (0..file.tensors.len()).map(|i| file.values(i)).collect();
    // the candidate's own input map, or none (it reads the token embedding)
    let own_input = (ix.input != lay.tok).then_some(ix.input);
    let mut matrices = vec![Some(lay.tok), Some(lay.pos), Some(lay.head_w), own_input];
    let mut vectors: Vec<&[f32]> = Vec::new();
    for g in &ix.layers {
        matrices.extend([g.wq, g.wk, g.wv, g.wo, g.w1, g.w2].map(Some));
        vectors.extend([&w[g.ln1][..], &w[g.ln2], &w[g.b1], &w[g.b2]]);
    }
    // a = max(e^{log a}, 1e-4), as the CPU decoder computes it
    let step = [w[ix.log_a][0].exp().max(MIN_STEP as f32)];
    vectors.extend([&w[lay.out_gamma][..], &w[lay.head_b], &step]);
    let packed = pack(file, &w, &matrices, &vectors)?;
    let layers = ix.layers.len();
    let mut consts = BTreeMap::new();
    let (ma, va) = (&packed.mat_at, &packed.vec_at);
    let w_in = if own_input.is_some() { ma[3] } else { ma[0] };
    for (name, at) in [("W_TOK", ma[0]), ("W_POS", ma[1]), ("W_HEAD", ma[2]), ("W_IN", w_in)] {
        consts.insert(name.to_string(), format!("{at}u"));
    }
    // layer 0's offsets (a checkpoint has at least one layer: crates/core/src/bounds.rs)
    for (k, name) in ["W_Q", "W_K", "W_V", "W_O", "W_1", "W_2"].iter().enumerate() {
        consts.insert(name.to_string(), format!("{}u", ma[4 + k]));
    }
    for (k, name) in ["F_LN1", "F_LN2", "F_B1", "F_B2"].iter().enumerate() {
        consts.insert(name.to_string(), format!("{}u", va[k]));
    }
    let tail = 4 * layers;
    for (name, at) in [("F_OUTGAMMA", va[tail]), ("F_HEADB", va[tail + 1]), ("F_A", va[tail + 2])] {
        consts.insert(name.to_string(), format!("{at}u"));
    }
    consts.insert("W_LAYER".into(), format!("{}u", layer_stride(ma, 4, 6, layers, "matrices")?));
    consts.insert("F_LAYER".into(), format!("{}u", layer_stride(va, 0, 4, layers, "vectors")?));
    let qd = ix.layers.first().map_or(0, |g| w[g.wq].len() / cfg.d_model);
    let h = cfg.n_head;
    let b = |x: bool| x.to_string();
    for (k, v) in [
        ("WG", format!("{}u", workgroup_size(cfg, qd))),
        ("F_SCALES", "0u".into()),
        ("D", format!("{}u", cfg.d_model)),
        ("V", format!("{}u", cfg.vocab_size)),
        ("H", format!("{h}u")),
        ("DH", format!("{}u", qd / h)),
        ("QD", format!("{qd}u")),
        ("M", format!("{}u", cfg.ff_hidden())),
        ("BLOCK", format!("{}u", cfg.block_size)),
        ("PR_ROW", format!("{}u", cfg.block_size + 1)),
        ("L", format!("{layers}u")),
        ("LAYER_NORM", b(cfg.norm == NormKind::LayerNorm)),
        ("GELU", b(cfg.activation == Activation::Gelu)),
        ("PROBS", b(cfg.ebt_update == EbtUpdate::Probs)),
        ("EPS", format!("{:e}", cfg.eps as f32)),
        ("SCALE", format!("{:e}", 1.0 / ((qd / h) as f32).sqrt())),
        ("RISE_TOL", format!("{RISE_TOL:e}")),
        ("VERDICT", format!("{VERDICT}u")),
        ("CLAMP", format!("{:e}", cfg.ebt_clamp as f32)),
    ] {
        consts.insert(k.to_string(), v);
    }
    let scr_len = scratch_layout(cfg, qd, &mut consts);
    let decoder = packed.decoder_source();
    Ok(Program { words: packed.words, fvec: packed.fvec, decoder, consts, scr_len, qd })
}

impl Program {
    /// One kernel's WGSL: the constants, the shared parts, then `parts`.
    fn source(&self, parts: &[&str]) -> String {
        let mut s = constants_source("crates/engine/src/gpu_ebt_decoder.rs", &self.consts);
        for part in [EBT_COMMON, REDUCE, self.decoder, ACT, EBT_NORM, EBT_LAYER].iter().chain(parts) {
            s.push_str(part);
            s.push('\n');
        }
        s
    }
}

/// The buffers whose size depends on the candidates and steps of a call,
/// grown when a call needs more (the bind group keeps the scratch alive).
struct Room {
    slots: usize,
    cand_floats: usize,
    scr_floats: usize,
    job: wgpu::Buffer,
    cand: wgpu::Buffer,
    staging: wgpu::Buffer,
    bind_group: wgpu::BindGroup,
}

pub struct GpuEbtDecoder {
    cfg: ModelConfig,
    device: wgpu::Device,
    queue: wgpu::Queue,
    adapter_name: String,
    /// The adapter is not known to be a hardware GPU.
    software: bool,
    bgl: wgpu::BindGroupLayout,
    append: wgpu::ComputePipeline,
    think: wgpu::ComputePipeline,
    words: wgpu::Buffer,
    fvec: wgpu::Buffer,
    kv: wgpu::Buffer,
    scr_len: usize,
    room: Option<Room>,
    /// Real tokens whose keys and values are cached (positions 0..n).
    n: usize,
    dispatches: u64,
}

impl GpuEbtDecoder {
    /// Uploads the model to `gpu` (Err(NoGpu) when it does not fit) and builds both kernels.
    pub async fn new(file: &PackedCheckpoint, gpu: &GpuDevice) -> Result<Self> {
        let cfg = file.config.clone();
        let Body::Ebt(ix) = &file.layout.body else {
            return Err(Error::Config(format!("`{}` is not an EBT", cfg.arch.name())));
        };
        let prog = program(file, ix)?;
        gpu.check_fits((prog.words.len().max(prog.fvec.len()) * 4) as u64)?;
        let (device, queue, adapter_name, software) = (gpu.device.clone(), gpu.queue.clone(), gpu.adapter_name().to_string(), gpu.software());
        let bgl = bind_group_layout(&device);
        // catch WGSL and pipeline errors as values instead of wgpu's panic
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor { label: Some("ebt"), bind_group_layouts: &[Some(&bgl)], immediate_size: 0 });
        let pipeline = |name: &str, parts: &[&str]| {
            let module =
                device.create_shader_module(wgpu::ShaderModuleDescriptor { label: Some(name), source: wgpu::ShaderSource::Wgsl(prog.source(parts).into()) });
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(name),
                layout: Some(&pl),
                module: &module,
                entry_point: Some(name),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        let append = pipeline("append", &[EBT_APPEND]);
        let think = pipeline("think", &[EBT_GRAD, EBT_THINK]);
        if let Some(e) = scope.pop().await {
            return Err(Error::Gpu(format!("building the EBT kernels: {e}")));
        }
        let st = wgpu::BufferUsages::STORAGE;
        let init = |label, contents: &[u8]| device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some(label), contents, usage: st });
        let words = init("words", bytemuck::cast_slice(&prog.words));
        let fvec = init("fvec", bytemuck::cast_slice(&prog.fvec));
        let kv = buffer(&device, "kv", cfg.layers * cfg.block_size * 2 * prog.qd, st);
        let scr_len = prog.scr_len;
        Ok(Self { cfg, device, queue, adapter_name, software, bgl, append, think, words, fvec, kv, scr_len, room: None, n: 0, dispatches: 0 })
    }

    pub fn adapter_name(&self) -> &str {
        &self.adapter_name
    }

    pub fn software(&self) -> bool {
        self.software
    }

    /// Forgets the window (positions restart at 0).
    pub fn reset(&mut self) {
        self.n = 0;
    }

    /// Compute dispatches issued so far, counted where they are recorded.
    pub fn dispatches(&self) -> u64 {
        self.dispatches
    }

    /// Makes room for `slots` jobs and `samples` candidates of `cand_len` floats.
    fn make_room(&mut self, slots: usize, samples: usize, cand_len: usize) {
        let (cand_floats, scr_floats) = (samples * cand_len, samples * self.scr_len);
        let fits = self.room.as_ref().is_some_and(|r| r.slots >= slots && r.cand_floats >= cand_floats && r.scr_floats >= scr_floats);
        if !fits {
            let old = self.room.as_ref().map_or((0, 0, 0), |r| (r.slots, r.cand_floats, r.scr_floats));
            let (slots, cand_floats, scr_floats) = (slots.max(old.0), cand_floats.max(old.1), scr_floats.max(old.2));
            let d = &self.device;
            let job = buffer(d, "job", slots * JOB_SLOT / 4, wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST);
            let st = wgpu::BufferUsages::STORAGE;
            let cand = buffer(d, "cand", cand_floats, st | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC);
            let scr = buffer(d, "scr", scr_floats, st);
            let staging = buffer(d, "staging", cand_floats, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
            let bind_group = d.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("ebt"),
                layout: &self.bgl,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &job,
                            offset: 0,
                            size: wgpu::BufferSize::new(std::mem::size_of::<Job>() as u64),
                        }),
                    },
                    wgpu::BindGroupEntry { binding: 1, resource: self.words.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 2, resource: self.fvec.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 3, resource: self.kv.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 4, resource: cand.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 5, resource: scr.as_entire_binding() },
                ],
            });
            self.room = Some(Room { slots, cand_floats, scr_floats, job, cand, staging, bind_group });
        }
    }

    /// Appends `tokens` at the next positions, then thinks the candidates for
    /// the character after them, the `index`-th of its sequence (which seeds
    /// their noise): one submission, one read-back.
    pub async fn push_many(&mut self, tokens: &[u32], index: u64, steps: usize, tol: Option<f32>, opts: &EbtThinkOpts) -> Result<TokenTrace> {
        let (block, v) = (self.cfg.block_size, self.cfg.vocab_size);
        if self.n + tokens.len() > block {
            return Err(Error::Gpu(format!("{} tokens at position {} overflow the block of {block}", tokens.len(), self.n)));
        }
        if self.n + tokens.len() == 0 {
            return Err(Error::Vocab("nothing to think about: the window is empty".into()));
        }
        let (samples, levels) = (opts.samples.max(1), steps + 1);
        // z(s) per level, E(s) per level, the verdict, then each step's Langevin noise
        let cand_len = levels * (v + 1) + VERDICT + steps * v;
        let last = (self.n + tokens.len() - 1) as u32;
        let appends = tokens.iter().enumerate().map(|(i, &token)| Job { pos: (self.n + i) as u32, token, ..Default::default() });
        let think = Job {
            pos: last,
            steps: steps as u32,
            tol: tol.unwrap_or(0.0),
            accept_lower: opts.accept_lower.into(),
            cand_len: cand_len as u32,
            ..Default::default()
        };
        let jobs: Vec<Job> = appends.chain((0..levels).map(|s| Job { step: s as u32, ..think })).collect();
        let mut slots = vec![0u8; jobs.len() * JOB_SLOT];
        for (i, job) in jobs.iter().enumerate() {
            slots[i * JOB_SLOT..i * JOB_SLOT + std::mem::size_of::<Job>()].copy_from_slice(bytemuck::bytes_of(job));
        }
        // every candidate starts at its noise z(0), not done, nothing kept,
        // with its Langevin noise (zeros when off: adding them changes nothing)
        let mut start = vec![0f32; samples * cand_len];
        let langevin = langevin_noise(opts.seed, index, samples, steps, v, opts.langevin);
        for (c, (z0, ld)) in candidate_noise(opts.seed, index, samples, v, self.cfg.ebt_noise).iter().zip(&langevin).enumerate() {
            start[c * cand_len..c * cand_len + v].copy_from_slice(z0);
            let noise_at = c * cand_len + levels * (v + 1) + VERDICT;
            for (s, n) in ld.iter().enumerate() {
                start[noise_at + s * v..noise_at + (s + 1) * v].copy_from_slice(n);
            }
        }
        self.make_room(jobs.len(), samples, cand_len);
        let room = self.room.as_ref().expect("make_room made it");
        let (queue, device) = (&self.queue, &self.device);
        queue.write_buffer(&room.job, 0, &slots);
        queue.write_buffer(&room.cand, 0, bytemuck::cast_slice(&start));
        let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("ebt") });
        let mut dispatched = 0;
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("ebt"), timestamp_writes: None });
            for i in 0..jobs.len() {
                let appending = i < tokens.len();
                pass.set_pipeline(if appending { &self.append } else { &self.think });
                pass.set_bind_group(0, &room.bind_group, &[(i * JOB_SLOT) as u32]);
                // an append is one workgroup; a thinking step one per candidate
                pass.dispatch_workgroups(if appending { 1 } else { samples as u32 }, 1, 1);
                dispatched += 1;
            }
        }
        enc.copy_buffer_to_buffer(&room.cand, 0, &room.staging, 0, (samples * cand_len * 4) as u64);
        queue.submit([enc.finish()]);
        let out = read_back(device, &room.staging).await?;
        self.dispatches += dispatched;
        self.n += tokens.len();
        let thoughts = (0..samples).map(|c| thought(&out[c * cand_len..(c + 1) * cand_len], v, levels)).collect::<Result<Vec<_>>>()?;
        Ok(trace_of(thoughts, opts.verify))
    }
}

/// One candidate's z and energies per kept step, from its region of `cand`.
fn thought(cand: &[f32], v: usize, levels: usize) -> Result<CandidateThought> {
    let (e, verdict) = (&cand[levels * v..levels * (v + 1)], &cand[levels * (v + 1)..]);
    let kept = (verdict[1] as usize).min(levels);
    if verdict[2] > 0.5 {
        return Err(Error::Config(format!("the energy became {} at thinking step {kept}", e[kept.min(levels - 1)])));
    }
    Ok(CandidateThought { logits: (0..kept).map(|s| cand[s * v..(s + 1) * v].to_vec()).collect(), energies: e[..kept].to_vec() })
}

fn buffer(device: &wgpu::Device, label: &str, floats: usize, usage: wgpu::BufferUsages) -> wgpu::Buffer {
    device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size: (floats.max(1) * 4) as u64, usage, mapped_at_creation: false })
}
