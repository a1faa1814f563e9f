"""A hybrid model's recurrent mixers under context parallelism over real torch.distributed (CPU, gloo), as Megatron-Core
runs them (parcalc.core.hybrid_context): no state passed between ranks, all-to-alls that swap the sequence split for a
head split around the conv1d and the scan, and back.

- Mamba-2 (Megatron-LM megatron/core/ssm/mamba_context_parallel.py @d98e8a64, MambaContextParallel): z, x, B, C, dt of
  in_proj's output all-to-all'd one by one (_all_to_all_cp2hp: split the features into cp parts, stack them on the
  tokens, one equal all_to_all_single), B and C first repeated group_repeat_count = cp / G times where G < cp; the
  load-balanced 2cp chunks put back in order (_undo_attention_load_balancing); each rank runs the causal depthwise
  conv1d and the Mamba-2 recurrence over the whole sequence for its heads; y * silu(z); the chunks load-balanced again
  and the output all-to-all'd back (_all_to_all_hp2cp).
- gated DeltaNet (megatron/core/ssm/gated_delta_net/common.py @d98e8a64, a2a_cp_to_hp / a2a_hp_to_cp): in_proj's
  output [q, k, v, z, beta, alpha] permuted by head (_build_head_perm_for_split_sections) and all-to-all'd in ONE call;
  the conv1d, the gated delta rule (L2-normed q and k, grouped value heads), the gated RMSNorm, then the output back.
Every all-to-all is an autograd function whose backward is the transposed all-to-all (Megatron's _AllToAll); each logs
the bytes this rank sends to the other ranks.

    python tests/ground_truth/hybrid_cp_worker.py --mixer mamba --world 2 --out DIR

Each rank writes DIR/rank<r>.json: the bytes it sent per call, forward and backward, and the largest difference of its
output and of the input's gradient from the unsplit mixer under autograd (fp64).
"""

from __future__ import annotations

import sys
from typing import ClassVar

import torch
import torch.distributed as dist
import torch.nn.functional as F
from gloo_ranks import gloo_parser, spawn_gloo  # a sibling: this folder is sys.path[0] when run as a script

BATCH, SEQ, KERNEL = 2, 16, 3
MAMBA = {"heads": 4, "head_dim": 2, "state": 3, "groups": 1}  # one group: at cp 2 and 4 its B and C are repeated
GDN = {"key_heads": 4, "value_heads": 8, "key_head_dim": 2, "value_head_dim": 3}
DTYPE = torch.float64


class Log:
    """What this rank sent: (phase, bytes) per all-to-all call."""

    phase: ClassVar[str] = "forward"
    sent: ClassVar[list[tuple[str, int]]] = []


class AllToAll(torch.autograd.Function):
    """[n, w] rows of cp equal blocks, block j to rank j (all_to_all_single); backward: the same the other way."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return _exchange(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        Log.phase = "backward"
        return _exchange(grad)


def _exchange(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    cp = dist.get_world_size()
    Log.sent.append((Log.phase, x.numel() * x.element_size() * (cp - 1) // cp))  # every block but this rank's own
    return out


def cp2hp(x: torch.Tensor, cp: int) -> torch.Tensor:
    """[s/cp, b, w] -> [s, b, w/cp] (all_to_all_sp2hp: feature blocks stacked on the tokens)."""
    s, b, w = x.shape
    stacked = torch.cat(torch.split(x.reshape(-1, w), w // cp, dim=1), dim=0)
    return AllToAll.apply(stacked).reshape(s * cp, b, w // cp)


def hp2cp(x: torch.Tensor, cp: int) -> torch.Tensor:
    """[s, b, w/cp] -> [s/cp, b, w] (all_to_all_hp2sp)."""
    s, b, w = x.shape
    out = AllToAll.apply(x.reshape(-1, w))
    return torch.cat(torch.split(out, s // cp * b, dim=0), dim=1).reshape(s // cp, b, w * cp)


def balanced_order(cp: int) -> list[int]:
    """The 2cp chunks in the order the ranks hold them: rank r has chunks r and 2cp - 1 - r (Megatron's balancing)."""
    return [c for r in range(cp) for c in (r, 2 * cp - 1 - r)]


def to_natural(x: torch.Tensor, cp: int) -> torch.Tensor:
    chunks = torch.chunk(x, 2 * cp, dim=0)
    order = balanced_order(cp)
    return torch.cat([chunks[order.index(c)] for c in range(2 * cp)], dim=0)


def to_balanced(x: torch.Tensor, cp: int) -> torch.Tensor:
    chunks = torch.chunk(x, 2 * cp, dim=0)
    return torch.cat([chunks[c] for c in balanced_order(cp)], dim=0)


def causal_conv(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """[s, b, c] through a depthwise causal conv1d of [c, K] taps, then SiLU."""
    s = x.shape[0]
    y = F.conv1d(x.permute(1, 2, 0), weight.unsqueeze(1), padding=KERNEL - 1, groups=weight.shape[0])[..., :s]
    return F.silu(y.permute(2, 0, 1))


def mamba_mixer(zxbcdt: torch.Tensor, p: dict, heads: range, group_of: list[int], cp: int = 1, rank: int = 0) -> torch.Tensor:
    """Megatron's Mamba-2 mixer from in_proj's output to out_proj's input, on whole sequences for `heads`: [s, b, .]."""
    hd, n = MAMBA["head_dim"], MAMBA["state"]
    h = len(heads)
    z, x, bb, cc, dt = torch.split(zxbcdt, [h * hd, h * hd, len(set(group_of)) * n, len(set(group_of)) * n, h], dim=-1)
    groups = sorted(set(group_of))
    conv_w = torch.cat([p["conv_x"][heads.start * hd:heads.stop * hd], *(p["conv_b"][g * n:(g + 1) * n] for g in groups),
                        *(p["conv_c"][g * n:(g + 1) * n] for g in groups)])  # fmt: skip
    xbc = causal_conv(torch.cat([x, bb, cc], dim=-1), conv_w)
    x, bb, cc = torch.split(xbc, [h * hd, len(groups) * n, len(groups) * n], dim=-1)
    dt = F.softplus(dt + p["dt_bias"][heads.start:heads.stop])
    s, b = x.shape[:2]
    out = []
    for i, head in enumerate(heads):
        g = groups.index(group_of[i])
        state = torch.zeros(b, hd, n, dtype=DTYPE)
        xs, bs, cs = x[..., i * hd:(i + 1) * hd], bb[..., g * n:(g + 1) * n], cc[..., g * n:(g + 1) * n]
        ys = []
        for t in range(s):
            decay = torch.exp(dt[t, :, i] * p["A"][head])[:, None, None]
            state = decay * state + dt[t, :, i, None, None] * xs[t, :, :, None] * bs[t, :, None, :]
            ys.append((state @ cs[t, :, :, None]).squeeze(-1) + p["D"][head] * xs[t])
        out.append(torch.stack(ys))
    return torch.cat(out, dim=-1) * F.silu(z)


def gdn_mixer(qkvzba: torch.Tensor, p: dict, value_heads: range) -> torch.Tensor:
    """The gated-DeltaNet mixer from in_proj's output to out_proj's input for `value_heads` (their key heads with them)."""
    hk_all, hv_all, dk, dv = GDN["key_heads"], GDN["value_heads"], GDN["key_head_dim"], GDN["value_head_dim"]
    per = hv_all // hk_all
    hv = len(value_heads)
    hk = hv // per
    q, k, v, z, beta, alpha = torch.split(qkvzba, [hk * dk, hk * dk, hv * dv, hv * dv, hv, hv], dim=-1)
    k0 = value_heads.start // per
    conv_w = torch.cat([p["conv_q"][k0 * dk:(k0 + hk) * dk], p["conv_k"][k0 * dk:(k0 + hk) * dk],
                        p["conv_v"][value_heads.start * dv:value_heads.stop * dv]])  # fmt: skip
    q, k, v = torch.split(causal_conv(torch.cat([q, k, v], dim=-1), conv_w), [hk * dk, hk * dk, hv * dv], dim=-1)
    s, b = q.shape[:2]
    q, k = F.normalize(q.reshape(s, b, hk, dk), dim=-1), F.normalize(k.reshape(s, b, hk, dk), dim=-1)
    v, z = v.reshape(s, b, hv, dv), z.reshape(s, b, hv, dv)
    g = -p["A"][value_heads.start:value_heads.stop].exp() * F.softplus(alpha + p["dt_bias"][value_heads.start:value_heads.stop])
    beta = beta.sigmoid()
    out = []
    for i in range(hv):
        j = i // per
        state = torch.zeros(b, dk, dv, dtype=DTYPE)
        ys = []
        for t in range(s):
            state = state * g[t, :, i].exp()[:, None, None]
            kt, vt = k[t, :, j], v[t, :, i]
            delta = vt - (state * kt[:, :, None]).sum(1)
            state = state + beta[t, :, i, None, None] * kt[:, :, None] * delta[:, None, :]
            ys.append((state * q[t, :, j, :, None]).sum(1) / dk**0.5)
        o = torch.stack(ys)
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + 1e-6) * p["norm"]
        out.append(o * F.silu(z[:, :, i]))
    return torch.cat(out, dim=-1)


def params(mixer: str, gen: torch.Generator) -> tuple[dict, int]:
    r = lambda *shape: torch.randn(*shape, generator=gen, dtype=DTYPE) * 0.5  # noqa: E731
    if mixer == "mamba":
        h, hd, n, g = MAMBA["heads"], MAMBA["head_dim"], MAMBA["state"], MAMBA["groups"]
        p = {"conv_x": r(h * hd, KERNEL), "conv_b": r(g * n, KERNEL), "conv_c": r(g * n, KERNEL), "dt_bias": r(h),
             "A": -torch.rand(h, generator=gen, dtype=DTYPE), "D": r(h)}  # fmt: skip
        return p, 2 * h * hd + 2 * g * n + h
    hk, hv, dk, dv = GDN["key_heads"], GDN["value_heads"], GDN["key_head_dim"], GDN["value_head_dim"]
    p = {"conv_q": r(hk * dk, KERNEL), "conv_k": r(hk * dk, KERNEL), "conv_v": r(hv * dv, KERNEL), "dt_bias": r(hv),
         "A": r(hv), "norm": 1 + r(dv)}  # fmt: skip
    return p, 2 * hk * dk + 2 * hv * dv + 2 * hv


def run(rank: int, cp: int, mixer: str) -> dict:
    gen = torch.Generator().manual_seed(4321)
    p, width = params(mixer, gen)
    full = torch.randn(SEQ, BATCH, width, generator=gen, dtype=DTYPE, requires_grad=True)
    dout_width = MAMBA["heads"] * MAMBA["head_dim"] if mixer == "mamba" else GDN["value_heads"] * GDN["value_head_dim"]
    dout = torch.randn(SEQ, BATCH, dout_width, generator=gen, dtype=DTYPE)
    if mixer == "mamba":
        h, n, g = MAMBA["heads"], MAMBA["state"], MAMBA["groups"]
        reference = mamba_mixer(full, p, range(h), [i * g // h for i in range(h)])
    else:
        reference = gdn_mixer(full, p, range(GDN["value_heads"]))
    reference.backward(dout)
    # this rank's tokens: chunks r and 2cp - 1 - r of the natural order
    mine = torch.cat([torch.chunk(torch.arange(SEQ), 2 * cp)[c] for c in (rank, 2 * cp - 1 - rank)])
    local = full.detach()[mine].clone().requires_grad_(True)
    Log.phase, Log.sent = "forward", []
    if mixer == "mamba":
        h, hd, n, g = MAMBA["heads"], MAMBA["head_dim"], MAMBA["state"], MAMBA["groups"]
        z, x, bb, cc, dt = torch.split(local, [h * hd, h * hd, g * n, g * n, h], dim=-1)
        repeat = cp // g if g < cp else 1  # MambaContextParallel.group_repeat_count
        bb, cc = (t.reshape(*t.shape[:2], g, 1, n).expand(-1, -1, -1, repeat, -1).reshape(*t.shape[:2], g * repeat * n) for t in (bb, cc))
        parts = [to_natural(cp2hp(t, cp), cp) for t in (z, x, bb, cc, dt)]
        heads = range(rank * h // cp, (rank + 1) * h // cp)
        y = mamba_mixer(torch.cat(parts, dim=-1), p, heads, [i * g // h for i in heads], cp, rank)
    else:
        hk, hv, dk, dv = GDN["key_heads"], GDN["value_heads"], GDN["key_head_dim"], GDN["value_head_dim"]
        sections = [hk * dk, hk * dk, hv * dv, hv * dv, hv, hv]
        blocks = torch.split(local, sections, dim=-1)  # the head permutation: each rank's part of every section together
        permuted = torch.cat([blk[..., j * blk.shape[-1] // cp:(j + 1) * blk.shape[-1] // cp] for j in range(cp) for blk in blocks], dim=-1)
        y = gdn_mixer(to_natural(cp2hp(permuted, cp), cp), p, range(rank * hv // cp, (rank + 1) * hv // cp))
    out = hp2cp(to_balanced(y, cp), cp)
    Log.phase = "backward"
    out.backward(dout[mine])
    errors = {"out": (out - reference.detach()[mine]).abs().max().item(), "dinput": (local.grad - full.grad[mine]).abs().max().item()}
    return {"errors": errors, "sent": {ph: [b for phase, b in Log.sent if phase == ph] for ph in ("forward", "backward")}}


def main(argv: list[str]) -> None:
    parser = gloo_parser()
    parser.add_argument("--mixer", choices=("mamba", "gdn"), required=True)
    args = parser.parse_args(argv)
    spawn_gloo(run, args.world, args.out, args.mixer)


if __name__ == "__main__":
    main(sys.argv[1:])
