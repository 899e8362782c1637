"""GlmMoeDsaForCausalLM in plain torch, for training.

The same math as transformers 5.17's modeling_glm_moe_dsa.py (checked in
the training run by loading the exported checkpoint there and comparing
logits): MLA with q/kv low-rank projections and interleaved RoPE, the
lightning indexer (relu(q.k) weighted per head, interleaved RoPE on the
first 64 of 128 dims, LayerNorm on the key), sigmoid noaux_tc MoE with a
shared expert. What differs is only how it is computed, for speed and
for training the indexer:
  * attention runs through scaled_dot_product_attention (v padded to the
    q/k width so the flash kernel applies); sparse attention is a boolean
    mask built from the indexer's top-k, as transformers' eager path does;
  * experts run densely (every token through every expert, weighted by the
    routing weights, zero for unselected experts): same result as
    dispatching, and fast for 8 small experts;
  * the indexer can return its scores with gradients (transformers runs it
    under no_grad) so it can be trained by KL divergence to the dense
    attention distribution (DeepSeek-V3.2's indexer warm-up);
  * e_score_correction_bias is updated by the auxiliary-loss-free rule
    (DeepSeek-V3): raised for under-loaded experts, lowered for
    over-loaded ones.
Attention modes: "dense" (causal), "sparse" (indexer top-k), "random"
(index_topk random causal positions: the control that must fail recall).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dtype)


def rope_cos_sin(positions, dim, theta, device):
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]  # [S, dim/2]
    return freqs.cos(), freqs.sin()


def rope_interleave(x, cos, sin):
    """Rotates pairs (x[2i], x[2i+1]); like transformers, the output lists
    the rotated evens then the rotated odds (a fixed permutation of the
    dims, applied to q and k alike, so every dot product is the GPT-J one).
    x: [..., S, H?, dim] with cos/sin broadcastable as [S, 1, dim/2] or [S, dim/2]."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def causal_mask(s, device):
    return torch.ones(s, s, dtype=torch.bool, device=device).tril()


class Indexer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.dim, self.rope = c["index_n_heads"], c["index_head_dim"], c["qk_rope_head_dim"]
        self.wq_b = nn.Linear(c["q_lora_rank"], self.heads * self.dim, bias=False)
        self.wk = nn.Linear(c["hidden_size"], self.dim, bias=False)
        self.k_norm = nn.LayerNorm(self.dim, eps=1e-6)
        self.weights_proj = nn.Linear(c["hidden_size"], self.heads, bias=False)

    def scores(self, x, qr, cos, sin):
        """I[b, t, s] = sum_h w[t,h] H^-1/2 relu(q[t,h].k[s] D^-1/2), fp32,
        -inf where s > t."""
        b, s, _ = x.shape
        with torch.autocast(device_type=x.device.type, enabled=False):
            q = F.linear(qr.float(), self.wq_b.weight.float()).view(b, s, self.heads, self.dim)
            k = F.layer_norm(F.linear(x.float(), self.wk.weight.float()), (self.dim,),
                             self.k_norm.weight.float(), self.k_norm.bias.float(), self.k_norm.eps)
            q = torch.cat([rope_interleave(q[..., :self.rope], cos[:, None, :], sin[:, None, :]), q[..., self.rope:]], -1)
            k = torch.cat([rope_interleave(k[..., :self.rope], cos, sin), k[..., self.rope:]], -1)
            logits = torch.einsum("bthd,bsd->bths", q, k) * (self.dim ** -0.5)
            w = F.linear(x.float(), self.weights_proj.weight.float()) * (self.heads ** -0.5)
            index = torch.einsum("bth,bths->bts", w, F.relu(logits))
            return index.masked_fill(~causal_mask(s, x.device), float("-inf"))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.heads = c["num_attention_heads"]
        self.nope, self.rope, self.v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        self.kv_lora = c["kv_lora_rank"]
        h = c["hidden_size"]
        self.q_a_proj = nn.Linear(h, c["q_lora_rank"], bias=False)
        self.q_a_layernorm = RMSNorm(c["q_lora_rank"], 1e-6)
        self.q_b_proj = nn.Linear(c["q_lora_rank"], self.heads * (self.nope + self.rope), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, self.kv_lora + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.kv_lora, 1e-6)
        self.kv_b_proj = nn.Linear(self.kv_lora, self.heads * (self.nope + self.v), bias=False)
        self.o_proj = nn.Linear(self.heads * self.v, h, bias=False)
        self.indexer = Indexer(c)
        self.scale = (self.nope + self.rope) ** -0.5
        self.layer_index = -1  # set by Layer: which layer aux["guide_layer"] means

    def forward(self, x, cos, sin, mode, topk, aux):
        """aux (dict or None) collects what the indexer losses need."""
        b, s, _ = x.shape
        qr = self.q_a_layernorm(self.q_a_proj(x))
        q = self.q_b_proj(qr).view(b, s, self.heads, self.nope + self.rope)
        kv = self.kv_a_proj_with_mqa(x)
        c_kv, k_pe = kv[..., :self.kv_lora], kv[..., self.kv_lora:]
        kvb = self.kv_b_proj(self.kv_a_layernorm(c_kv)).view(b, s, self.heads, self.nope + self.v)
        k_nope, v = kvb[..., :self.nope], kvb[..., self.nope:]
        q_pe = rope_interleave(q[..., self.nope:], cos[:, None, :], sin[:, None, :])
        k_pe = rope_interleave(k_pe, cos, sin)[:, :, None, :].expand(b, s, self.heads, self.rope)
        q = torch.cat([q[..., :self.nope], q_pe], -1).transpose(1, 2)  # [B, H, S, D]
        k = torch.cat([k_nope, k_pe], -1).transpose(1, 2)
        v = v.transpose(1, 2)

        allowed = None  # [B, S, S] bool, None = plain causal
        index = None
        # Scores only where they are used: a sparse choice among more than
        # topk keys, or the indexer's own training.
        if (mode == "sparse" and s > topk) or (aux is not None and aux.get("want_index")):
            index = self.indexer.scores(x.detach(), qr.detach(), cos, sin) if aux is not None else \
                self.indexer.scores(x, qr, cos, sin)
        if mode in ("sparse", "random") and s > topk:
            if mode == "sparse":
                sel = index.detach().topk(topk, dim=-1).indices
            else:
                # Random scores on causal positions: a uniform random subset.
                r = torch.rand(b, s, s, device=x.device).masked_fill(~causal_mask(s, x.device), -1.0)
                sel = r.topk(topk, dim=-1).indices
            allowed = torch.zeros(b, s, s, dtype=torch.bool, device=x.device).scatter_(-1, sel, True)
            allowed &= causal_mask(s, x.device)
        if aux is not None and aux.get("want_probs"):
            with torch.no_grad():
                att = torch.matmul(q.float(), k.float().transpose(-1, -2)) * self.scale
                m = causal_mask(s, x.device) if allowed is None else allowed
                att = att.masked_fill(~m[:, None] if m.dim() == 3 else ~m, float("-inf")).softmax(-1)
                aux.setdefault("probs", []).append(att.mean(1))  # [B, S, S]
                aux.setdefault("index", []).append(index)
                aux.setdefault("allowed", []).append(allowed)
        rows = aux.get("guide_rows") if aux is not None and aux.get("guide_layer") == self.layer_index else None
        if rows is not None:
            # Attention guidance (training only): log-probability that head
            # 0 of this layer puts on the guide positions (the planted fact
            # a recall answer copies), computed for the guided query rows.
            b_idx, t_idx, target = rows  # [N], [N], [N, S] bool
            logits = torch.einsum("nd,nsd->ns", q[b_idx, 0, t_idx].float(), k[b_idx, 0].float()) * self.scale
            keep = torch.arange(s, device=x.device)[None] <= t_idx[:, None]
            logp = torch.log_softmax(logits.masked_fill(~keep, float("-inf")), -1)
            aux["guide_logp"] = torch.logsumexp(logp.masked_fill(~target, float("-inf")), -1)
        o = attend(q, k, v, allowed, self.scale)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, self.heads * self.v))


def attend(q, k, v, allowed, scale):
    dv = v.shape[-1]
    if HAS_SDPA:
        if dv < q.shape[-1]:
            v = F.pad(v, (0, q.shape[-1] - dv))  # same width as q/k: flash kernels apply
        if allowed is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None], scale=scale)
        return o[..., :dv]
    s = q.shape[-2]
    att = torch.matmul(q, k.transpose(-1, -2)) * scale
    m = causal_mask(s, q.device) if allowed is None else allowed[:, None]
    att = att.masked_fill(~m, float("-inf")).softmax(-1)
    return torch.matmul(att, v)


class Mlp(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Moe(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, e, i = c["hidden_size"], c["n_routed_experts"], c["moe_intermediate_size"]
        self.e, self.k = e, c["num_experts_per_tok"]
        self.scaling = c["routed_scaling_factor"]
        self.gate_weight = nn.Parameter(torch.empty(e, h))
        self.register_buffer("e_score_correction_bias", torch.zeros(e))
        self.gate_proj = nn.Parameter(torch.empty(e, i, h))
        self.up_proj = nn.Parameter(torch.empty(e, i, h))
        self.down_proj = nn.Parameter(torch.empty(e, h, i))
        self.shared_experts = Mlp(h, i * c["n_shared_experts"])
        self.register_buffer("load", torch.zeros(e))  # routed token counts since the last bias update

    def forward(self, x):
        shape = x.shape
        xf = x.reshape(-1, shape[-1])
        with torch.autocast(device_type=x.device.type, enabled=False):
            scores = F.linear(xf.float(), self.gate_weight.float()).sigmoid()
            idx = (scores + self.e_score_correction_bias).topk(self.k, dim=-1).indices
            w = scores.gather(1, idx)
            w = w / (w.sum(-1, keepdim=True) + 1e-20) * self.scaling
            dense_w = torch.zeros_like(scores).scatter(1, idx, w)
        if self.training:
            self.load += torch.zeros_like(self.load).scatter_add_(0, idx.reshape(-1), torch.ones_like(idx.reshape(-1), dtype=self.load.dtype))
        g = torch.einsum("nd,eid->nei", xf, self.gate_proj.to(xf.dtype))
        u = torch.einsum("nd,eid->nei", xf, self.up_proj.to(xf.dtype))
        y = torch.einsum("nei,edi->ned", F.silu(g) * u, self.down_proj.to(xf.dtype))
        out = torch.einsum("ne,ned->nd", dense_w.to(y.dtype), y)
        return (out.reshape(shape) + self.shared_experts(x)).to(x.dtype)

    @torch.no_grad()
    def update_bias(self, rate):
        # Without routed tokens the sign term is zero: no update, no sync.
        self.e_score_correction_bias += rate * torch.sign(self.load.mean() - self.load)
        self.load.zero_()


class Layer(nn.Module):
    def __init__(self, c, i):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.mlp = Moe(c) if i >= c["first_k_dense_replace"] else Mlp(c["hidden_size"], c["intermediate_size"])
        self.self_attn.layer_index = i

    def forward(self, x, cos, sin, mode, topk, aux):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mode, topk, aux)
        return x + self.mlp(self.post_attention_layernorm(x))


class TinyGlm(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Layer(c, i) for i in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        self.reset_parameters()

    def reset_parameters(self):
        std = 0.02
        for name, p in self.named_parameters():
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                nn.init.ones_(p)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, std=std)
        # Residual-branch outputs start smaller (GPT-2 style).
        for layer in self.layers:
            nn.init.normal_(layer.self_attn.o_proj.weight, std=std / math.sqrt(2 * len(self.layers)))
            mlp = layer.mlp
            down = mlp.down_proj if isinstance(mlp, Moe) else mlp.down_proj.weight
            nn.init.normal_(down, std=std / math.sqrt(2 * len(self.layers)))

    def forward(self, ids, mode="dense", topk=None, aux=None):
        return self.lm_head(self.hidden(ids, mode, topk, aux))

    def hidden(self, ids, mode="dense", topk=None, aux=None):
        """The final-normed hidden states (what the lm_head and an MTP layer read)."""
        b, s = ids.shape
        topk = topk or self.c["index_topk"]
        cos, sin = rope_cos_sin(torch.arange(s, device=ids.device), self.c["qk_rope_head_dim"],
                                self.c["rope_parameters"]["rope_theta"], ids.device)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mode, topk, aux)
        return self.norm(x)

    def moe_layers(self):
        return [l.mlp for l in self.layers if isinstance(l.mlp, Moe)]

    def indexer_parameters(self):
        return [p for l in self.layers for p in l.self_attn.indexer.parameters()]

    def main_parameters(self):
        ids = {id(p) for p in self.indexer_parameters()}
        return [p for p in self.parameters() if id(p) not in ids]


class MtpLayer(nn.Module):
    """GLM-5's multi-token-prediction layer (model.layers.{num_hidden_layers}),
    as vLLM's DeepSeekMultiTokenPredictorLayer and spar's Model::MtpOps
    compute it: row t reads the token at t + 1 (its embedding zeroed at
    position 0) and the main model's final-normed state at t;
        x = eh_proj([enorm(embed(token)) ; hnorm(state)])
        out = decoder layer (MLA + its own indexer + MoE)(x)   # pre-norm
        logits = lm_head(shared_head.norm(out))                 # predicts token t + 2
    The embedding and lm_head are the main model's (shared, frozen here).
    For more drafts the layer runs again on its own `out` and its draft."""

    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.c = c
        self.enorm = RMSNorm(h, c["rms_norm_eps"])
        self.hnorm = RMSNorm(h, c["rms_norm_eps"])
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        self.block = Layer(c, c["num_hidden_layers"])  # MoE (index >= first_k_dense_replace), full indexer
        self.head_norm = RMSNorm(h, c["rms_norm_eps"])
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                    nn.init.ones_(p)
                elif name.endswith(".bias"):
                    nn.init.zeros_(p)
                else:
                    nn.init.normal_(p, std=0.02)
            # Start as "the state passes through": eh_proj ~ [small | I].
            self.eh_proj.weight[:, h:] += torch.eye(h)

    def forward(self, emb, state, positions, mode="dense", topk=None, aux=None):
        """emb: embeddings of the tokens after each row [B, S, h]; state: the
        states those rows read [B, S, h]; positions: [S] (rows are causal in
        this order)."""
        topk = topk or self.c["index_topk"]
        emb = emb.masked_fill((positions == 0)[None, :, None], 0.0)
        x = self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(state)], -1))
        cos, sin = rope_cos_sin(positions, self.c["qk_rope_head_dim"], self.c["rope_parameters"]["rope_theta"],
                                emb.device)
        return self.block(x, cos, sin, mode, topk, aux)

    def logits(self, out, lm_head):
        return lm_head(self.head_norm(out))

    def indexer_parameters(self):
        return list(self.block.self_attn.indexer.parameters())

    def main_parameters(self):
        ids = {id(p) for p in self.indexer_parameters()}
        return [p for p in self.parameters() if id(p) not in ids]
