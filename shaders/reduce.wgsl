// Workgroup reductions and the storage+workgroup barrier, shared by every
// kernel (NRGPT's descent, EBT's append and thinking); WG is generated.

var<workgroup> red: array<f32, WG>;

// Orders storage and workgroup memory across the workgroup.
fn sync() {
    storageBarrier();
    workgroupBarrier();
}

// Sum of one value per thread; every thread must call it.
fn wg_sum(tid: u32, v: f32) -> f32 {
    red[tid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (tid < s) {
            red[tid] = red[tid] + red[tid + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

// Max of one value per thread; every thread must call it.
fn wg_max(tid: u32, v: f32) -> f32 {
    red[tid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (tid < s) {
            red[tid] = max(red[tid], red[tid + s]);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}
