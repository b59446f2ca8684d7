//! The WGSL engine: one fused compute pipeline (`shaders/descend.wgsl`) that
//! descends each new token through all T steps in one dispatch, reading the
//! earlier tokens' keys from a GPU-resident cache. Weights stay packed
//! (f32 bits, or int8/int4 codes + block scales) and are decoded in the shader.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use wgpu::util::DeviceExt;

use nrgpt_core::format::{packed_lens, PackedCheckpoint, PackedTensor, Scheme, BLOCK};
use nrgpt_core::{Activation, Error, NormKind, Result};

use crate::decode_params::DecodeParams;
use crate::Trace;

/// Threads in the one workgroup.
const WG: u32 = 256;

/// The kernel's source files, one function (kernel part) each, concatenated
/// after the generated constants.
const COMMON: &str = include_str!("../../../shaders/common.wgsl");
const NORM: &str = include_str!("../../../shaders/norm.wgsl");
const ATTN: &str = include_str!("../../../shaders/attn_grad.wgsl");
const FF: &str = include_str!("../../../shaders/ff_grad.wgsl");
const READOUT: &str = include_str!("../../../shaders/readout.wgsl");
const UPDATE: &str = include_str!("../../../shaders/update.wgsl");
const DESCEND: &str = include_str!("../../../shaders/descend.wgsl");
const W_F32: &str = include_str!("../../../shaders/weights_f32.wgsl");
const W_INT8: &str = include_str!("../../../shaders/weights_int8.wgsl");
const W_INT4: &str = include_str!("../../../shaders/weights_int4.wgsl");

/// The bind-group layout of `shaders/common.wgsl`, binding for binding.
fn bind_group_layout(device: &wgpu::Device) -> wgpu::BindGroupLayout {
    let storage = |binding, read_only| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer { ty: wgpu::BufferBindingType::Storage { read_only }, has_dynamic_offset: false, min_binding_size: None },
        count: None,
    };
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("descend"),
        entries: &[
            // job: uniform Job, one 256-byte slot per token of a submission
            wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: true,
                    min_binding_size: wgpu::BufferSize::new(std::mem::size_of::<Job>() as u64),
                },
                count: None,
            },
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
    consts: BTreeMap<&'static str, String>,
    io_len: usize,
    out_start: usize,
    levels: usize,
}

/// The packed weights: matrices in `words` (global element index space, each
/// matrix padded to a multiple of 32 elements), then scales and vectors in `fvec`.
struct PackedWeights {
    scheme: Scheme,
    words: Vec<u32>,
    fvec: Vec<f32>,
    consts: BTreeMap<&'static str, String>,
}

/// The kernel's name for each parameter it reads, with the parameter's index
/// in the weight layout (None: this model has no such parameter).
fn kernel_params(p: &DecodeParams) -> ([(&'static str, Option<usize>); 8], [(&'static str, Option<usize>); 7]) {
    let (lay, ix) = (&p.lay, p.block());
    let matrices = [
        ("W_TOK", Some(lay.tok)),
        ("W_POS", Some(lay.pos)),
        ("W_Q", Some(ix.wq)),
        ("W_K", Some(ix.wk)),
        ("W_1", Some(ix.w1)),
        ("W_2", ix.w2),
        ("W_ETA", ix.eta_w),
        ("W_HEAD", Some(lay.head_w)),
    ];
    let vectors = [
        ("F_GAMMA", Some(ix.gamma)),
        ("F_ALPHA", Some(ix.alpha)),
        ("F_B1", Some(ix.b1)),
        ("F_B2", ix.b2),
        ("F_FFSCALE", Some(ix.ff_scale)),
        ("F_LOGC", ix.log_c),
        ("F_OUTGAMMA", Some(lay.out_gamma)),
    ];
    (matrices, vectors)
}

fn pack(p: &DecodeParams, file: &PackedCheckpoint) -> Result<PackedWeights> {
    let scheme = file.scheme;
    let (matrices, vectors) = kernel_params(p);
    let mut consts = BTreeMap::new();
    let (mut words, mut scales, mut elems) = (Vec::new(), Vec::new(), 0usize);
    for (cname, i) in matrices {
        consts.insert(cname, format!("{elems}u"));
        let Some(i) = i else { continue };
        let (w, name) = (&p.w[i], p.lay.name(i));
        let padded = w.len().div_ceil(BLOCK) * BLOCK;
        match (scheme, &file.tensors[i]) {
            (Scheme::Int8 | Scheme::Int4, PackedTensor::Quant { words: qw, scales: qs, .. }) => {
                if (qw.len(), qs.len()) != packed_lens(w.len(), scheme) {
                    return Err(Error::Checkpoint(format!("packed `{name}` has {} words for {} elements", qw.len(), w.len())));
                }
                words.extend_from_slice(qw);
                scales.extend_from_slice(qs);
            }
            (Scheme::Int8 | Scheme::Int4, _) => return Err(Error::Checkpoint(format!("`{name}` is not quantized"))),
            // f32 and f16 (already widened to f32) go as raw bits
            _ => {
                words.extend(w.iter().map(|v| v.to_bits()));
                words.resize(words.len() + padded - w.len(), 0);
            }
        }
        elems += padded;
    }
    let mut fvec = Vec::new();
    consts.insert("F_SCALES", "0u".into());
    fvec.extend_from_slice(&scales);
    for (cname, i) in vectors {
        consts.insert(cname, format!("{}u", fvec.len()));
        if let Some(i) = i {
            fvec.extend_from_slice(&p.w[i]);
        }
    }
    consts.insert("F_HEADB", format!("{}u", fvec.len()));
    fvec.extend_from_slice(&p.w[p.lay.head_b]);
    consts.insert("F_DIR0", format!("{}u", fvec.len()));
    fvec.extend_from_slice(&p.dirs[0]);
    consts.insert("F_DIR1", format!("{}u", fvec.len()));
    fvec.extend_from_slice(&p.dirs[1]);
    Ok(PackedWeights { scheme, words, fvec, consts })
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
        consts.insert(name, format!("{at}u"));
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
        ("BETA", format!("{:e}", 1.0 / (c.head_dim as f32).sqrt())),
    ] {
        consts.insert(k, val);
    }
    IoLayout { consts, io_len: at, out_start, levels }
}

/// The whole WGSL program for one checkpoint and step count.
fn source(packed: &PackedWeights, lay: &IoLayout) -> String {
    let mut s = String::from("// generated by crates/engine/src/gpu_decoder.rs\n");
    for (k, v) in lay.consts.iter().chain(packed.consts.iter()) {
        let ty = if v == "true" || v == "false" { "bool" } else if v.ends_with('u') { "u32" } else { "f32" };
        let _ = writeln!(s, "const {k}: {ty} = {v};");
    }
    let weights = match packed.scheme {
        Scheme::Int8 => W_INT8,
        Scheme::Int4 => W_INT4,
        _ => W_F32,
    };
    for part in [COMMON, weights, NORM, ATTN, FF, READOUT, UPDATE, DESCEND] {
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
    /// Finds an adapter (Err(NoGpu) when there is none) and uploads the model.
    /// `file` is the checkpoint `params` came from (its packed codes go to the GPU as they are).
    pub async fn new(file: &PackedCheckpoint, params: &DecodeParams, steps: usize) -> Result<Self> {
        let params = params.clone();
        let packed = pack(&params, file)?;
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions { power_preference: wgpu::PowerPreference::HighPerformance, ..Default::default() })
            .await
            .map_err(|e| Error::NoGpu(format!("no adapter: {e}")))?;
        let info = adapter.get_info();
        // browsers may leave the adapter's name empty
        let adapter_name = if info.name.is_empty() { format!("{:?}", info.backend) } else { format!("{} ({:?})", info.name, info.backend) };
        let mut limits = wgpu::Limits::default();
        let need = (packed.words.len().max(packed.fvec.len()) * 4) as u64;
        limits.max_storage_buffer_binding_size = limits.max_storage_buffer_binding_size.max(need.next_power_of_two());
        limits.max_buffer_size = limits.max_buffer_size.max(need.next_power_of_two());
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor { label: Some("nrgpt"), required_limits: limits, ..Default::default() })
            .await
            .map_err(|e| Error::NoGpu(format!("adapter {adapter_name} gave no device: {e}")))?;
        let bgl = bind_group_layout(&device);
        let lay = io_layout(&params, steps);
        let (pipeline, bind_group, job, tokens, io, staging) = Self::build(&device, &bgl, &packed, &params, &lay).await?;
        Ok(Self { device, queue, adapter_name, packed, params, lay, bgl, pipeline, bind_group, job, tokens, io, staging, n: 0, dispatches: 0 })
    }

    #[allow(clippy::type_complexity)]
    async fn build(
        device: &wgpu::Device,
        bgl: &wgpu::BindGroupLayout,
        packed: &PackedWeights,
        params: &DecodeParams,
        lay: &IoLayout,
    ) -> Result<(wgpu::ComputePipeline, wgpu::BindGroup, wgpu::Buffer, wgpu::Buffer, wgpu::Buffer, wgpu::Buffer)> {
        // catch WGSL and pipeline errors as values instead of wgpu's panic
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("descend"),
            source: wgpu::ShaderSource::Wgsl(source(packed, lay).into()),
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
        let empty = |label, size: usize, usage| device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size: (size.max(1) * 4) as u64, usage, mapped_at_creation: false });
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
        let (pipeline, bind_group, job, tokens, io, staging) = Self::build(&self.device, &self.bgl, &self.packed, &self.params, &self.lay).await?;
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
        let out = self.read_staging().await?;
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

    async fn read_staging(&self) -> Result<Vec<f32>> {
        let slice = self.staging.slice(..);
        let (tx, rx) = futures_channel::oneshot::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::Wait { submission_index: None, timeout: None })
            .map_err(|e| Error::Gpu(format!("waiting for the GPU: {e}")))?;
        rx.await
            .map_err(|_| Error::Gpu("the GPU dropped the read-back".into()))?
            .map_err(|e| Error::Gpu(format!("mapping the read-back buffer: {e}")))?;
        let data = bytemuck::cast_slice::<u8, f32>(&slice.get_mapped_range().map_err(|e| Error::Gpu(format!("{e}")))?).to_vec();
        self.staging.unmap();
        Ok(data)
    }
}
