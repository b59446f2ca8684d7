//! The fast backend's buffers for a training step stay below the core's
//! training estimate (`nrgpt_core::bounds::memory::train`), measured by a
//! counting global allocator; `crates/engine/tests/memory_budget.rs` does the
//! same for decoding and the reference forward. Alone in its binary, so no
//! other test's allocations land in a measurement.

use candle_core::{DType, Device};
use nrgpt_core::bounds::memory::{self, Figure};
use nrgpt_core::model::init_weights;
use nrgpt_core::{Arch, ModelConfig};
use trainer::fast::FastModel;

#[test]
fn a_training_step_allocates_less_than_its_estimate() {
    // the process's one-time allocations (thread and gemm set-up) before measuring
    let warm = ModelConfig::new(Arch::Gpt, 8, 8, 1, 1, 8);
    let w = init_weights(&warm, 0, DType::F32, &Device::Cpu).unwrap();
    // One thread: with two, which pool thread first runs a chunk (and makes
    // its thread-local gemm buffers inside a measurement) depends on the
    // machine's load; the suite saw a 16% overshoot from that alone.
    FastModel::new(&warm, &w, 9, 1).unwrap().loss_and_grad(&[1; 72], &[1; 72], None).unwrap();
    let mut rng = nrgpt_core::rng::Rng64::new(0x7EA1);
    let mut worst = 0f64;
    for i in 0..40 {
        let arch = [Arch::NrgptFf2w, Arch::NrgptFf1, Arch::Gpt, Arch::GptRec][i % 4];
        let mut pick = |lo: usize, hi: usize| lo + rng.below(hi - lo + 1);
        let mut cfg = ModelConfig::new(arch, pick(2, 40), pick(1, 32), pick(1, 4), pick(1, 3), pick(2, 48));
        cfg.head_dim = pick(1, 8);
        cfg.ff_mult = pick(1, 4);
        let batch = pick(1, 20);
        let w = init_weights(&cfg, i as u64, DType::F32, &Device::Cpu).unwrap();
        let n = batch * cfg.block_size;
        let ids: Vec<u32> = (0..n).map(|t| (t % cfg.vocab_size) as u32).collect();
        let used = alloc::peak_of(|| {
            let mut m = FastModel::new(&cfg, &w, batch, 1).unwrap();
            m.loss_and_grad(&ids, &ids, None).unwrap();
        });
        let est: u64 = memory::train(&cfg, Figure::new("--batch", batch), false).terms.iter().filter(|t| t.what != memory::RUNTIME).map(|t| t.bytes()).sum();
        assert!(used <= est, "case {i}: a step of {cfg:?} at batch {batch} allocated {used} bytes, estimated {est}");
        worst = worst.max(used as f64 / est as f64);
    }
    println!("training: the largest peak was {:.0}% of its estimate", 100.0 * worst);
}

/// The peak bytes live during a closure, from a counting global allocator.
mod alloc {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;

    struct Counting;
    static LIVE: AtomicU64 = AtomicU64::new(0);
    static PEAK: AtomicU64 = AtomicU64::new(0);
    static ONE: Mutex<()> = Mutex::new(());

    fn grew(by: u64) {
        let now = LIVE.fetch_add(by, Ordering::SeqCst) + by;
        PEAK.fetch_max(now, Ordering::SeqCst);
    }

    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            let p = unsafe { System.alloc(l) };
            if !p.is_null() {
                grew(l.size() as u64);
            }
            p
        }
        unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
            let p = unsafe { System.alloc_zeroed(l) };
            if !p.is_null() {
                grew(l.size() as u64);
            }
            p
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            unsafe { System.dealloc(p, l) };
            LIVE.fetch_sub(l.size() as u64, Ordering::SeqCst);
        }
        unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
            let q = unsafe { System.realloc(p, l, new) };
            if !q.is_null() {
                grew(new as u64);
                LIVE.fetch_sub(l.size() as u64, Ordering::SeqCst);
            }
            q
        }
    }

    #[global_allocator]
    static A: Counting = Counting;

    pub fn peak_of(f: impl FnOnce()) -> u64 {
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let base = LIVE.load(Ordering::SeqCst);
        PEAK.store(base, Ordering::SeqCst);
        f();
        PEAK.load(Ordering::SeqCst) - base
    }
}
