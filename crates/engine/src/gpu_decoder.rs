//! The WGSL engine: one fused compute pipeline (`shaders/descend.wgsl`) that
//! descends each new token through all T steps in one dispatch, reading the
//! earlier tokens' keys from a GPU-resident cache. Weights stay packed
//! (f32 bits, or int8/int4 codes + block scales) and are decoded in the shader.

use std::collections::BTreeMap;

use wgpu::util::DeviceExt;

use nrgpt_core::format::PackedCheckpoint;
use nrgpt_core::{Activation, Error, NormKind, Result};

use crate::decode_params::DecodeParams;
use crate::gpu_shared::{constants_source, job_entry, pack, read_back, storage_entry, GpuDevice, PackedWeights};
use crate::Trace;

/// Threads in the one workgroup.
const WG: u32 = 256;

/// The kernel's source files, one function (kernel part) each, concatenated
/// after the generated constants.
const COMMON: &str = include_str!("../../../shaders/common.wgsl");
const REDUCE: &str = include_str!("../../../shaders/reduce.wgsl");
const ACT: &str = include_str!("../../../shaders/act.wgsl");
const NORM: &str = include_str!("../../../shaders/norm.wgsl");
const ATTN: &str = include_str!("../../../shaders/attn_grad.wgsl");
const FF: &str = include_str!("../../../shaders/ff_grad.wgsl");
const READOUT: &str = include_str!("../../../shaders/readout.wgsl");
const UPDATE: &str = include_str!("../../../shaders/update.wgsl");
const DESCEND: &str = include_str!("../../../shaders/descend.wgsl");

/// The bind-group layout of `shaders/common.wgsl`, binding for binding.
fn bind_group_layout(device: &wgpu::Device) -> wgpu::BindGroupLayout {
    let storage = storage_entry;
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("descend"),
        entries: &[
            // job: uniform Job, one 256-byte slot per token of a submission
            job_entry(std::mem::size_of::<Job>() as u64),
            storage(1, true),  // words
            storage(2, true),  // fvec
            storage(3, false), // kcache
            storage(4, false), // io
            storage(5, true),  // tokens
        ],
    })
}

/// One token's dispatch (`Job` in shaders/common.wgsl).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Job {
    start: u32,
    first: u32,
    tol: f32,
    _pad: u32,
}

/// Bytes between job slots (WebGPU's minimum uniform offset alignment).
const JOB_SLOT: u64 = 256;

/// Where the state, scratch and trace live in the `io` buffer, and the sizes
/// the kernel is compiled for.
struct IoLayout {
    consts: BTreeMap<String, String>,
    io_len: usize,
    out_start: usize,
    levels: usize,
}

/// The kernel's name for each parameter it reads, with the parameter's index
/// in the weight layout (None: this model has no such parameter).
fn kernel_matrices(p: &DecodeParams) -> [(&'static str, Option<usize>); 8] {
    let (lay, ix) = (&p.lay, p.block());
    [
        ("W_TOK", Some(lay.tok)),
        ("W_POS", Some(lay.pos)),
        ("W_Q", Some(ix.wq)),
        ("W_K", Some(ix.wk)),
        ("W_1", Some(ix.w1)),
        ("W_2", ix.w2),
        ("W_ETA", ix.eta_w),
        ("W_HEAD", Some(lay.head_w)),
    ]
}

/// The kernel's name for each vector it reads (empty: this model has none).
fn kernel_vectors(p: &DecodeParams) -> [(&'static str, &[f32]); 11] {
    let (lay, ix, w) = (&p.lay, p.block(), &p.w);
    let opt = |i: Option<usize>| i.map_or(&[][..], |i| &w[i][..]);
    [
        ("F_GAMMA", &p.gain),
        ("F_NBIAS", &p.norm_bias),
        ("F_ALPHA", &w[ix.alpha]),
        ("F_B1", &w[ix.b1]),
        ("F_B2", opt(ix.b2)),
        ("F_FFSCALE", &w[ix.ff_scale]),
        ("F_LOGC", opt(ix.log_c)),
        ("F_OUTGAMMA", &w[lay.out_gamma]),
        ("F_HEADB", &w[lay.head_b]),
        ("F_DIR0", &p.dirs[0]),
        ("F_DIR1", &p.dirs[1]),
    ]
}

/// The packed weights and the constants naming where each one starts.
fn pack_for_kernel(p: &DecodeParams, file: &PackedCheckpoint) -> Result<(PackedWeights, BTreeMap<String, String>)> {
    let (matrices, vectors) = (kernel_matrices(p), kernel_vectors(p));
    let mi: Vec<Option<usize>> = matrices.iter().map(|m| m.1).collect();
    let vs: Vec<&[f32]> = vectors.iter().map(|v| v.1).collect();
    let packed = pack(file, &p.w, &mi, &vs)?;
    let mut consts = BTreeMap::from([("F_SCALES".to_string(), "0u".to_string())]);
    for (name, at) in matrices.iter().map(|m| m.0).zip(&packed.mat_at).chain(vectors.iter().map(|v| v.0).zip(&packed.vec_at)) {
        consts.insert(name.to_string(), format!("{at}u"));
    }
    Ok((packed, consts))
}

fn io_layout(p: &DecodeParams, steps: usize) -> IoLayout {
    let c = &p.cfg;
    let (d, m, v, hd, levels) = (c.d_model, c.ff_hidden(), c.vocab_size, p.hd(), steps + 1);
    let mut consts = BTreeMap::new();
    let regions = [
        ("IO_X", d),
        ("IO_SIG", m),
        ("IO_DSIG", m),
        ("IO_INNER", m),
        ("IO_S", c.n_head * c.block_size),
        ("IO_E", levels),
        ("IO_SL", levels * v),
        ("IO_PROJ", 2 * levels),
        ("IO_STEPS", 1),
    ];
    let (mut at, mut out_start) = (0usize, 0usize);
    for (name, len) in regions {
        if name == "IO_E" {
            // everything from here on is read back after each dispatch
            out_start = at;
        }
        consts.insert(name.to_string(), format!("{at}u"));
        at += len;
    }
    let b = |x: bool| x.to_string();
    for (k, val) in [
        ("WG", format!("{WG}u")),
        ("D", format!("{d}u")),
        ("H", format!("{}u", c.n_head)),
        ("DH", format!("{}u", c.head_dim)),
        ("HD", format!("{hd}u")),
        ("M", format!("{m}u")),
        ("V", format!("{v}u")),
        ("BLOCK", format!("{}u", c.block_size)),
        ("LEVELS", format!("{levels}u")),
        ("LAYER_NORM", b(c.norm == NormKind::LayerNorm)),
        ("GELU", b(c.activation == Activation::Gelu)),
        ("FF2W", b(p.block().w2.is_some())),
        ("FREE_ETA", b(p.block().eta_w.is_some())),
        ("EPS", format!("{:e}", c.eps as f32)),
        ("BETA", format!("{:e}", c.beta() as f32)),
        ("DIAG", b(c.attn_diag)),
        ("NORM_BIAS", b(p.block().norm_bias.is_some())),
    ] {
        consts.insert(k.to_string(), val);
    }
    IoLayout { consts, io_len: at, out_start, levels }
}

/// The whole WGSL program for one checkpoint and step count.
fn source(packed: &PackedWeights, wconsts: &BTreeMap<String, String>, lay: &IoLayout) -> String {
    let consts: BTreeMap<String, String> = lay.consts.iter().chain(wconsts).map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut s = constants_source("crates/engine/src/gpu_decoder.rs", &consts);
    for part in [COMMON, REDUCE, packed.decoder_source(), NORM, ACT, ATTN, FF, READOUT, UPDATE, DESCEND] {
        s.push_str(part);
        s.push('\n');
    }
    s
}

pub struct GpuDecoder {
    device: wgpu::Device,
    queue: wgpu::Queue,
    adapter_name: String,
    packed: PackedWeights,
    /// Where each packed weight starts, as the kernel's constants.
    wconsts: BTreeMap<String, String>,
    params: DecodeParams,
    lay: IoLayout,
    bgl: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    job: wgpu::Buffer,
    tokens: wgpu::Buffer,
    io: wgpu::Buffer,
    staging: wgpu::Buffer,
    n: usize,
    dispatches: u64,
}

impl GpuDecoder {
    /// Uploads the model to `gpu` (Err(NoGpu) when it does not fit). `file`
    /// is the checkpoint `params` came from (its packed codes go to the GPU as they are).
    pub async fn new(file: &PackedCheckpoint, params: &DecodeParams, steps: usize, gpu: &GpuDevice) -> Result<Self> {
        let params = params.clone();
        let (packed, wconsts) = pack_for_kernel(&params, file)?;
        gpu.check_fits((packed.words.len().max(packed.fvec.len()) * 4) as u64)?;
        let (device, queue, adapter_name) = (gpu.device.clone(), gpu.queue.clone(), gpu.adapter_name().to_string());
        let bgl = bind_group_layout(&device);
        let lay = io_layout(&params, steps);
        let (pipeline, bind_group, job, tokens, io, staging) = Self::build(&device, &bgl, &packed, &wconsts, &params, &lay).await?;
        Ok(Self { device, queue, adapter_name, packed, wconsts, params, lay, bgl, pipeline, bind_group, job, tokens, io, staging, n: 0, dispatches: 0 })
    }

    #[allow(clippy::type_complexity)]
    async fn build(
        device: &wgpu::Device,
        bgl: &wgpu::BindGroupLayout,
        packed: &PackedWeights,
        wconsts: &BTreeMap<String, String>,
        params: &DecodeParams,
        lay: &IoLayout,
    ) -> Result<(wgpu::ComputePipeline, wgpu::BindGroup, wgpu::Buffer, wgpu::Buffer, wgpu::Buffer, wgpu::Buffer)> {
        // catch WGSL and pipeline errors as values instead of wgpu's panic
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("descend"),
            source: wgpu::ShaderSource::Wgsl(source(packed, wconsts, lay).into()),
        });
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor { label: Some("descend"), bind_group_layouts: &[Some(bgl)], immediate_size: 0 });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("descend"),
            layout: Some(&pl),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = scope.pop().await {
            return Err(Error::Gpu(format!("building the descent kernel: {e}")));
        }
        let init = |label, contents: &[u8], usage| device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some(label), contents, usage });
        let empty = |label, size: usize, usage| {
            device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size: (size.max(1) * 4) as u64, usage, mapped_at_creation: false })
        };
        let st = wgpu::BufferUsages::STORAGE;
        let words = init("words", bytemuck::cast_slice(&packed.words), st);
        let fvec = init("fvec", bytemuck::cast_slice(&packed.fvec), st);
        let c = &params.cfg;
        let kcache = empty("kcache", lay.levels * c.block_size * params.hd(), st);
        let io = empty("io", lay.io_len, st | wgpu::BufferUsages::COPY_SRC);
        let tokens = empty("tokens", c.block_size, st | wgpu::BufferUsages::COPY_DST);
        let job = empty("job", c.block_size * JOB_SLOT as usize / 4, wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST);
        let staging = empty("staging", lay.io_len - lay.out_start, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("descend"),
            layout: bgl,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &job,
                        offset: 0,
                        size: wgpu::BufferSize::new(std::mem::size_of::<Job>() as u64),
                    }),
                },
                wgpu::BindGroupEntry { binding: 1, resource: words.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: fvec.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: kcache.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 4, resource: io.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 5, resource: tokens.as_entire_binding() },
            ],
        });
        Ok((pipeline, bind_group, job, tokens, io, staging))
    }

    pub fn adapter_name(&self) -> &str {
        &self.adapter_name
    }

    pub fn reset(&mut self) {
        self.n = 0;
    }

    /// Compute dispatches issued so far, counted where they are recorded.
    pub fn dispatches(&self) -> u64 {
        self.dispatches
    }

    /// Rebuilds the pipeline and cache for a different step count.
    pub async fn set_steps(&mut self, steps: usize) -> Result<()> {
        self.lay = io_layout(&self.params, steps);
        let (pipeline, bind_group, job, tokens, io, staging) =
            Self::build(&self.device, &self.bgl, &self.packed, &self.wconsts, &self.params, &self.lay).await?;
        (self.pipeline, self.bind_group, self.job, self.tokens, self.io, self.staging) = (pipeline, bind_group, job, tokens, io, staging);
        self.n = 0;
        Ok(())
    }

    /// Descends `tokens` at the next positions (one dispatch each, one
    /// submission, one read-back); returns the last one's trace.
    pub async fn push_many(&mut self, tokens: &[u32], tol: Option<f32>) -> Result<Trace> {
        let block = self.params.cfg.block_size;
        if tokens.is_empty() || self.n + tokens.len() > block {
            return Err(Error::Gpu(format!("{} tokens at position {} overflow the block of {block}", tokens.len(), self.n)));
        }
        // one job slot and one dispatch per token, all in one submission
        let tol = tol.unwrap_or(0.0).max(0.0);
        let mut slots = vec![0u8; tokens.len() * JOB_SLOT as usize];
        for i in 0..tokens.len() {
            let job = Job { start: (self.n + i) as u32, first: i as u32, tol, _pad: 0 };
            let at = i * JOB_SLOT as usize;
            slots[at..at + std::mem::size_of::<Job>()].copy_from_slice(bytemuck::bytes_of(&job));
        }
        self.queue.write_buffer(&self.job, 0, &slots);
        self.queue.write_buffer(&self.tokens, 0, bytemuck::cast_slice(tokens));
        let mut enc = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("descend") });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("descend"), timestamp_writes: None });
            pass.set_pipeline(&self.pipeline);
            for i in 0..tokens.len() {
                pass.set_bind_group(0, &self.bind_group, &[(i as u64 * JOB_SLOT) as u32]);
                // the one place this engine dispatches; the tests read the count
                pass.dispatch_workgroups(1, 1, 1);
                self.dispatches += 1;
            }
        }
        let out_bytes = ((self.lay.io_len - self.lay.out_start) * 4) as u64;
        enc.copy_buffer_to_buffer(&self.io, (self.lay.out_start * 4) as u64, &self.staging, 0, out_bytes);
        self.queue.submit([enc.finish()]);
        let out = read_back(&self.device, &self.staging).await?;
        self.n += tokens.len();
        let (levels, v) = (self.lay.levels, self.params.cfg.vocab_size);
        let steps_used = (out[levels + levels * v + 2 * levels] as usize).min(levels - 1);
        let used = steps_used + 1;
        let step_logits: Vec<Vec<f32>> = (0..used).map(|t| out[levels + t * v..levels + (t + 1) * v].to_vec()).collect();
        let proj_at = levels + levels * v;
        Ok(Trace {
            logits: step_logits[steps_used].clone(),
            energies: out[..used].to_vec(),
            proj: (0..used).map(|t| [out[proj_at + 2 * t], out[proj_at + 2 * t + 1]]).collect(),
            step_logits,
            steps_used,
            ..Default::default()
        })
    }
}
