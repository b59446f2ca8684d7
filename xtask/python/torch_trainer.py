"""PyTorch CPU twin of our trainer, for the throughput row of `cargo xtask bench`.

Same model math as src/ (NRGPT with the analytic energy gradients of
crates/core/src/energy.rs, or the pre-norm GPT of crates/core/src/gpt.rs), same batch, AdamW, clipping.
It only times training steps: it prints one line `tokens_per_s <float>`.
Weights start random (same shapes and init scale); speed does not depend on them.
"""
import argparse
import math
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--model", default="nrgpt-ff2w")
p.add_argument("--d-model", type=int, default=128)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--steps", type=int, default=4)
p.add_argument("--block", type=int, default=64)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--ff-mult", type=int, default=4)
p.add_argument("--iters", type=int, default=10)
p.add_argument("--warmup-iters", type=int, default=2)
p.add_argument("--vocab", type=int, default=65)
p.add_argument("--threads", type=int, default=0)
a = p.parse_args()
if a.threads:
    torch.set_num_threads(a.threads)
torch.manual_seed(0)

D, H, n, V, M = a.d_model, a.heads, a.block, a.vocab, a.d_model * a.ff_mult
dh = D // H
EPS = 1e-5


def P(*shape, std=0.02, const=None):
    t = torch.full(shape, const) if const is not None else torch.randn(*shape) * std
    return torch.nn.Parameter(t)


def layer_norm(x, gamma):
    # xh = (x - mean x) / sqrt(var x + eps), g = gamma * xh
    xc = x - x.mean(-1, keepdim=True)
    return xc / torch.sqrt(xc.pow(2).mean(-1, keepdim=True) + EPS) * gamma


def heads(t):
    b = t.shape[0]
    return t.view(b, n, H, dh).transpose(1, 2)


def merge(t):
    b = t.shape[0]
    return t.transpose(1, 2).reshape(b, n, H * dh)


params = {"tok": P(V, D), "pos": P(n, D), "out_g": P(D, const=1.0), "head_w": P(V, D), "head_b": P(V, const=0.0)}
strict = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=0)  # masked where key >= query
causal = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # masked where key > query
first_row = torch.ones(n, 1)
first_row[0] = 0.0

if a.model == "nrgpt-ff2w":
    params.update(g=P(D, const=1.0), wq=P(H * dh, D), wk=P(H * dh, D), alpha=P(H, const=1.0),
                  w1=P(M, D), b1=P(M, const=0.0), w2=P(D, M), b2=P(D, const=0.0),
                  ff_scale=P(1, const=1.0), log_c=P(1, const=0.0))

    def body(x):
        beta = 1.0 / math.sqrt(dh)
        for _ in range(a.steps):
            g = layer_norm(x, params["g"])
            q, k = heads(g @ params["wq"].T), heads(g @ params["wk"].T)
            s = (q @ k.transpose(-1, -2) * beta).masked_fill(strict, -1e30)
            pr = torch.softmax(s, -1) * first_row
            # dE_AT/dg_A = - sum_h alpha_h Wq_h^T sum_B p_AB k_B
            ctx = (pr @ k) * params["alpha"].view(1, H, 1, 1)
            grad_at = -(merge(ctx) @ params["wq"])
            # dE_FF/dg = -(W2 s(u) + b2) - W1^T (s'(u) * (W2^T g)), u = W1 g + b1
            u = g @ params["w1"].T + params["b1"]
            cdf = 0.5 * (1 + torch.erf(u / math.sqrt(2)))
            pdf = torch.exp(-0.5 * u * u) / math.sqrt(2 * math.pi)
            out = (u * cdf) @ params["w2"].T + params["b2"]
            back = ((cdf + u * pdf) * (g @ params["w2"])) @ params["w1"]
            grad = grad_at - (out + back) * params["ff_scale"]
            # x <- x - c diag(gamma) dE/dg
            x = x - grad * params["g"] * params["log_c"].exp()
        return x
elif a.model in ("gpt", "gpt-rec"):
    layers = a.steps if a.model == "gpt" else 1
    for l in range(layers):
        params.update({f"{l}.ln1": P(D, const=1.0), f"{l}.wq": P(D, D), f"{l}.wk": P(D, D), f"{l}.wv": P(D, D),
                       f"{l}.wo": P(D, D), f"{l}.ln2": P(D, const=1.0), f"{l}.w1": P(M, D), f"{l}.b1": P(M, const=0.0),
                       f"{l}.w2": P(D, M), f"{l}.b2": P(D, const=0.0)})

    def body(x):
        for i in range(a.steps):
            l = min(i, layers - 1)
            w = lambda s: params[f"{l}.{s}"]
            h = layer_norm(x, w("ln1"))
            q, k, v = heads(h @ w("wq").T), heads(h @ w("wk").T), heads(h @ w("wv").T)
            s = (q @ k.transpose(-1, -2) / math.sqrt(dh)).masked_fill(causal, -1e30)
            x = x + merge(torch.softmax(s, -1) @ v) @ w("wo").T
            h = layer_norm(x, w("ln2"))
            x = x + torch.nn.functional.gelu(h @ w("w1").T + w("b1")) @ w("w2").T + w("b2")
        return x
else:
    raise SystemExit(f"unknown model {a.model}")

opt = torch.optim.AdamW(params.values(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
data = torch.randint(0, V, (a.batch, n + 1))


def train_step():
    x = params["tok"][data[:, :-1]] + params["pos"]
    logits = layer_norm(body(x), params["out_g"]) @ params["head_w"].T + params["head_b"]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), data[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
    opt.step()


for _ in range(a.warmup_iters):
    train_step()
t0 = time.perf_counter()
for _ in range(a.iters):
    train_step()
dt = time.perf_counter() - t0
print(f"params {sum(p.numel() for p in params.values())}")
print(f"tokens_per_s {a.iters * a.batch * n / dt:.1f}")
