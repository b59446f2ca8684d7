"""PyTorch CPU twin of our trainer, for the throughput rows of `cargo xtask bench`.

Same model math as our trainer (NRGPT with the analytic energy gradients of
crates/core/src/energy.rs, the pre-norm GPT of crates/core/src/gpt.rs, or the
EBT of crates/core/src/ebt.rs), same batch, AdamW, clipping.

Timing (default): times training steps in eager mode and with torch.compile and
prints `eager_tokens_per_s <float>` and `compiled_tokens_per_s <float>` (or
`compiled_failed <reason>`). Weights start random (same shapes and init scale):
speed does not depend on them.

`--check-ckpt CKPT --check-iter K` (EBT): loads one of our checkpoints, rebuilds
the batch and the noise of training iteration K exactly as our trainer draws
them (SplitMix64, crates/core/src/rng.rs), and prints the EBT training loss and
the global gradient norm as JSON, to compare with row K of our log.csv. The loss
differentiates through `torch.autograd.grad(..., create_graph=True)`, not
through our analytic dE/dz, so agreement tests ebt.rs's hand-written VJP too.
"""
import argparse
import json
import math
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--model", default="nrgpt-ff2w")
p.add_argument("--d-model", type=int, default=128)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--steps", type=int, default=4)
p.add_argument("--layers", type=int, default=2, help="EBT: layers of the energy network")
p.add_argument("--ebt-noise", type=float, default=1.0)
p.add_argument("--block", type=int, default=64)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--ff-mult", type=int, default=4)
p.add_argument("--iters", type=int, default=10)
p.add_argument("--warmup-iters", type=int, default=2)
p.add_argument("--vocab", type=int, default=65)
p.add_argument("--threads", type=int, default=0)
p.add_argument("--modes", default="eager,compiled", help="which timings to run")
p.add_argument("--check-ckpt", help="EBT: print the training loss of this checkpoint on the batch of --check-iter")
p.add_argument("--check-iter", type=int, default=0)
p.add_argument("--data", default="data/tinyshakespeare/input.txt")
a = p.parse_args()
if a.threads:
    torch.set_num_threads(a.threads)
torch.manual_seed(0)


class Cfg:
    """The subset of ModelConfig (crates/core/src/config.rs) the models read."""

    def __init__(self, arch, V, D, H, dh, steps, layers, n, ff_mult, norm="layer-norm", act="gelu", eps=1e-5, noise=1.0):
        self.arch, self.V, self.D, self.H, self.dh = arch, V, D, H, dh
        self.steps, self.layers, self.n, self.M = steps, layers, n, D * ff_mult
        self.norm, self.act, self.eps, self.noise = norm, act, eps, noise


def P(*shape, std=0.02, const=None):
    t = torch.full(shape, float(const)) if const is not None else torch.randn(*shape) * std
    return torch.nn.Parameter(t)


def norm(c, x, gamma):
    # LayerNorm: xh = (x - mean x) / sqrt(var x + eps); RMSNorm: xh = x / sqrt(mean x^2 + eps)
    if c.norm == "layer-norm":
        x = x - x.mean(-1, keepdim=True)
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + c.eps) * gamma


def act(c, u):
    # exact (erf) GELU, as crates/core/src/ops.rs
    return torch.nn.functional.gelu(u) if c.act == "gelu" else torch.relu(u)


def heads(c, t):
    b, n = t.shape[0], t.shape[1]
    return t.view(b, n, c.H, c.dh).transpose(1, 2)


def merge(c, t):
    b, n = t.shape[0], t.shape[2]
    return t.transpose(1, 2).reshape(b, n, c.H * c.dh)


def gpt_layer_params(c, l, applied):
    # GPT-2's scaled init of the projections that write into the residual stream (layout.rs)
    proj = 0.02 / math.sqrt(2 * applied)
    hd = c.H * c.dh
    return {f"layers.{l}.ln1": P(c.D, const=1), f"layers.{l}.attn.wq": P(hd, c.D), f"layers.{l}.attn.wk": P(hd, c.D),
            f"layers.{l}.attn.wv": P(hd, c.D), f"layers.{l}.attn.wo": P(c.D, hd, std=proj), f"layers.{l}.ln2": P(c.D, const=1),
            f"layers.{l}.mlp.w1": P(c.M, c.D), f"layers.{l}.mlp.b1": P(c.M, const=0), f"layers.{l}.mlp.w2": P(c.D, c.M, std=proj),
            f"layers.{l}.mlp.b2": P(c.D, const=0)}


def init_params(c):
    head_out = 1 if c.arch == "ebt" else c.V
    w = {"tok_emb": P(c.V, c.D), "pos_emb": P(c.n, c.D), "out_norm.gamma": P(c.D, const=1),
         "head.w": P(head_out, c.D), "head.b": P(head_out, const=0)}
    hd = c.H * c.dh
    if c.arch == "nrgpt-ff2w":
        w.update({"block.norm.gamma": P(c.D, const=1), "block.attn.wq": P(hd, c.D), "block.attn.wk": P(hd, c.D),
                  "block.attn.alpha": P(c.H, const=1), "block.ff.w1": P(c.M, c.D), "block.ff.b1": P(c.M, const=0),
                  "block.ff.w2": P(c.D, c.M), "block.ff.b2": P(c.D, const=0), "block.ff_scale": P(1, const=1),
                  "block.eta.log_c": P(1, const=0)})
    elif c.arch in ("gpt", "gpt-rec"):
        for l in range(c.steps if c.arch == "gpt" else 1):
            w.update(gpt_layer_params(c, l, c.steps))
    elif c.arch == "ebt":
        for l in range(c.layers):
            w.update(gpt_layer_params(c, l, c.layers))
        # a = e^4.6 ~ 100 (layout.rs EBT_LOG_A0)
        w["ebt.log_a"] = P(1, const=4.6)
    else:
        raise SystemExit(f"unknown model {c.arch}")
    return w


def masks(n):
    causal = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # masked where key > query
    strict = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=0)  # masked where key >= query
    first_row = torch.ones(n, 1)
    first_row[0] = 0.0
    return causal, strict, first_row


def nrgpt_body(c, w, x):
    _, strict, first_row = masks(x.shape[1])
    beta = 1.0 / math.sqrt(c.dh)
    for _ in range(c.steps):
        g = norm(c, x, w["block.norm.gamma"])
        q, k = heads(c, g @ w["block.attn.wq"].T), heads(c, g @ w["block.attn.wk"].T)
        s = (q @ k.transpose(-1, -2) * beta).masked_fill(strict, -1e30)
        pr = torch.softmax(s, -1) * first_row
        # dE_AT/dg_A = - sum_h alpha_h Wq_h^T sum_B p_AB k_B
        ctx = (pr @ k) * w["block.attn.alpha"].view(1, c.H, 1, 1)
        grad_at = -(merge(c, ctx) @ w["block.attn.wq"])
        # dE_FF/dg = -(W2 s(u) + b2) - W1^T (s'(u) * (W2^T g)), u = W1 g + b1
        u = g @ w["block.ff.w1"].T + w["block.ff.b1"]
        cdf = 0.5 * (1 + torch.erf(u / math.sqrt(2)))
        pdf = torch.exp(-0.5 * u * u) / math.sqrt(2 * math.pi)
        out = (u * cdf) @ w["block.ff.w2"].T + w["block.ff.b2"]
        back = ((cdf + u * pdf) * (g @ w["block.ff.w2"])) @ w["block.ff.w1"]
        grad = grad_at - (out + back) * w["block.ff_scale"]
        # x <- x - c diag(gamma) dE/dg
        x = x - grad * w["block.norm.gamma"] * w["block.eta.log_c"].exp()
    return x


def gpt_layer(c, w, l, x, causal):
    L = lambda s: w[f"layers.{l}.{s}"]
    h = norm(c, x, L("ln1"))
    q, k, v = heads(c, h @ L("attn.wq").T), heads(c, h @ L("attn.wk").T), heads(c, h @ L("attn.wv").T)
    s = (q @ k.transpose(-1, -2) / math.sqrt(c.dh)).masked_fill(causal, -1e30)
    x = x + merge(c, torch.softmax(s, -1) @ v) @ L("attn.wo").T
    h = norm(c, x, L("ln2"))
    return x + act(c, h @ L("mlp.w1").T + L("mlp.b1")) @ L("mlp.w2").T + L("mlp.b2")


def lm_loss(c, w, ids, targets):
    x = w["tok_emb"][ids] + w["pos_emb"][: ids.shape[1]]
    if c.arch == "nrgpt-ff2w":
        x = nrgpt_body(c, w, x)
    else:
        causal, _, _ = masks(ids.shape[1])
        for i in range(c.steps):
            x = gpt_layer(c, w, i if c.arch == "gpt" else 0, x, causal)
    logits = norm(c, x, w["out_norm.gamma"]) @ w["head.w"].T + w["head.b"]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, c.V), targets.reshape(-1))


# ---- EBT (crates/core/src/ebt.rs) ----

def ebt_context(c, w, ids):
    """The real stream: per layer, the real tokens' keys and values (B, H, n, dh)."""
    n = ids.shape[1]
    causal, _, _ = masks(n)
    x = w["tok_emb"][ids] + w["pos_emb"][:n]
    keys, values = [], []
    for l in range(c.layers):
        h = norm(c, x, w[f"layers.{l}.ln1"])
        keys.append(heads(c, h @ w[f"layers.{l}.attn.wk"].T))
        values.append(heads(c, h @ w[f"layers.{l}.attn.wv"].T))
        # the last layer's output feeds nothing: predictions read only keys and values
        if l + 1 < c.layers:
            x = gpt_layer(c, w, l, x, causal)
    return keys, values, causal


def ebt_energy(c, w, ctx, z):
    """E_A(z) (B, n): the prediction at A attends to the real tokens B <= A and to itself."""
    keys, values, causal = ctx
    n = z.shape[1]
    p = torch.softmax(z, -1) @ w["tok_emb"] + w["pos_emb"][:n]
    scale = 1.0 / math.sqrt(c.dh)
    for l in range(c.layers):
        L = lambda s: w[f"layers.{l}.{s}"]
        h = norm(c, p, L("ln1"))
        q, ks, vs = heads(c, h @ L("attn.wq").T), heads(c, h @ L("attn.wk").T), heads(c, h @ L("attn.wv").T)
        s_real = (q @ keys[l].transpose(-1, -2) * scale).masked_fill(causal, -1e30)
        s_self = (q * ks).sum(-1, keepdim=True) * scale
        pr = torch.softmax(torch.cat([s_real, s_self], -1), -1)
        att = pr[..., :n] @ values[l] + pr[..., n:] * vs
        p = p + merge(c, att) @ L("attn.wo").T
        h = norm(c, p, L("ln2"))
        p = p + act(c, h @ L("mlp.w1").T + L("mlp.b1")) @ L("mlp.w2").T + L("mlp.b2")
    return (norm(c, p, w["out_norm.gamma"]) @ w["head.w"].T + w["head.b"]).squeeze(-1)


def ebt_loss(c, w, ids, targets, z0):
    """Mean over the S thinking steps of CE(softmax(z(s+1)), targets); z detached between steps,
    each step differentiated through its own input gradient (second order)."""
    ctx = ebt_context(c, w, ids)
    a = torch.clamp_min(w["ebt.log_a"].exp(), 1e-4)
    z = z0.detach().requires_grad_(True)
    total = 0.0
    for _ in range(c.steps):
        e = ebt_energy(c, w, ctx, z)
        (g,) = torch.autograd.grad(e.sum(), z, create_graph=True)
        nxt = z - a * g
        total = total + torch.nn.functional.cross_entropy(nxt.reshape(-1, c.V), targets.reshape(-1))
        z = nxt.detach().requires_grad_(True)
    return total / c.steps


def ebt_loss_func(c, w, ids, targets, z0):
    """The same loss with torch.func.grad for dE/dz (a form torch.compile may trace where
    torch.autograd.grad(create_graph=True) is not)."""
    ctx = ebt_context(c, w, ids)
    a = torch.clamp_min(w["ebt.log_a"].exp(), 1e-4)
    dE = torch.func.grad(lambda zz: ebt_energy(c, w, ctx, zz).sum())
    z = z0
    total = 0.0
    for _ in range(c.steps):
        nxt = z - a * dE(z)
        total = total + torch.nn.functional.cross_entropy(nxt.reshape(-1, c.V), targets.reshape(-1))
        z = nxt.detach()
    return total / c.steps


# ---- our RNG and batches, to rebuild a training iteration exactly ----

MASK64 = (1 << 64) - 1


class Rng64:
    """SplitMix64 exactly as crates/core/src/rng.rs."""

    def __init__(self, seed):
        self.state = (seed ^ 0x9E3779B97F4A7C15) & MASK64

    @classmethod
    def derive(cls, seed, stream):
        r = cls(seed)
        r.state ^= (stream * 0xD1B54A32D192ED03) & MASK64
        r.next_u64()
        return r

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self):
        return (self.next_u64() >> 11) * (1.0 / (1 << 53))

    def below(self, n):
        return int(self.uniform() * n) % max(n, 1)

    def normal(self):
        u1 = 1.0 - self.uniform()
        u2 = self.uniform()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


# trainer/src/train.rs: the noise stream of EBT's training candidates
STREAM_EBT = 0xEB7


def check(a):
    from safetensors import safe_open

    with safe_open(a.check_ckpt, "pt") as f:
        md = f.metadata()
        cfg = json.loads(md["config"])
        w = {k: f.get_tensor(k) for k in f.keys() if not k.startswith("opt.")}
        state = json.loads(md["train_state"])
    if cfg["arch"] != "ebt":
        raise SystemExit(f"--check-ckpt needs an EBT checkpoint, not {cfg['arch']}")
    vocab = json.loads(md["vocab"])
    c = Cfg("ebt", cfg["vocab_size"], cfg["d_model"], cfg["n_head"], cfg["head_dim"], cfg["steps"], cfg["layers"],
            cfg["block_size"], cfg["ff_mult"], cfg["norm"], cfg["activation"], cfg["eps"], cfg["ebt_noise"])
    s = state["settings"]
    index = {ch: i for i, ch in enumerate(vocab)}
    with open(a.data, encoding="utf-8") as fh:
        text = fh.read()
    ids = [index[ch] for ch in text]
    train = ids[: len(ids) * 9 // 10]
    # trainer/src/data.rs random_batch_ids, with the iteration's stream
    rng = Rng64.derive(s["seed"], a.check_iter)
    starts = [rng.below(len(train) - c.n - 1) for _ in range(s["batch"])]
    x = torch.tensor([train[t: t + c.n] for t in starts])
    y = torch.tensor([train[t + 1: t + c.n + 1] for t in starts])
    # trainer/src/think_plan.rs draw: z(0) first, from the iteration's EBT stream (train.rs)
    noise = Rng64.derive(s["seed"] ^ STREAM_EBT, a.check_iter)
    z0 = torch.tensor([noise.normal() * c.noise for _ in range(s["batch"] * c.n * c.V)], dtype=torch.float64)
    z0 = z0.to(torch.float32).view(s["batch"], c.n, c.V)
    w = {k: v.requires_grad_(True) for k, v in w.items()}
    loss = ebt_loss(c, w, x, y, z0)
    loss.backward()
    gnorm = math.sqrt(sum(float((v.grad.double() ** 2).sum()) for v in w.values() if v.grad is not None))
    print(json.dumps({"loss": float(loss.detach()), "grad_norm": gnorm, "iter": a.check_iter, "ckpt_iter": state["iter"]}))


def time_training(a):
    c = Cfg(a.model, a.vocab, a.d_model, a.heads, a.d_model // a.heads, a.steps, a.layers, a.block, a.ff_mult, noise=a.ebt_noise)
    data = torch.randint(0, c.V, (a.batch, c.n + 1))
    ids, targets = data[:, :-1], data[:, 1:]
    z0 = torch.randn(a.batch, c.n, c.V) * c.noise
    print(f"params {sum(t.numel() for t in init_params(c).values())}")
    for mode in a.modes.split(","):
        torch.manual_seed(0)
        w = init_params(c)
        opt = torch.optim.AdamW(w.values(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
        if c.arch == "ebt":
            if mode == "eager":
                loss_fn = lambda: ebt_loss(c, w, ids, targets, z0)
            elif mode == "compiled-autograd":
                # the eager form as it stands: autograd.grad(create_graph=True) inside the compiled function
                loss_fn = torch.compile(lambda: ebt_loss(c, w, ids, targets, z0))
            else:
                # autograd.grad(create_graph=True) inside a compiled graph needs double backward,
                # which AOTAutograd lacks; torch.func gives a graph that is differentiated once
                names = list(w)
                vg = torch.compile(torch.func.grad_and_value(
                    lambda ps: ebt_loss_func(c, dict(zip(names, ps)), ids, targets, z0)))

                def loss_fn():
                    grads, loss = vg(tuple(w.values()))
                    for t, g in zip(w.values(), grads):
                        t.grad = g
                    return loss
        else:
            f = lambda: lm_loss(c, w, ids, targets)
            loss_fn = f if mode == "eager" else torch.compile(f)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn()
            if loss.requires_grad:
                loss.backward()
            torch.nn.utils.clip_grad_norm_(w.values(), 1.0)
            opt.step()
            return loss

        try:
            t0 = time.perf_counter()
            for _ in range(a.warmup_iters):
                step()
            warm = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in range(a.iters):
                loss = step()
            dt = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 - the reason is the result when compile cannot run here
            reason = " ".join(f"{type(e).__name__}: {e}".split())[:600]
            print(f"{mode}_failed {reason}", flush=True)
            continue
        print(f"{mode}_warmup_s {warm:.1f}")
        print(f"{mode}_final_loss {float(loss.detach()):.4f}")
        print(f"{mode}_tokens_per_s {a.iters * a.batch * c.n / dt:.1f}", flush=True)


if a.check_ckpt:
    check(a)
else:
    time_training(a)
