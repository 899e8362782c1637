"""Writes the trained model as a GLM-5 checkpoint directory in the real
layout: tensor names of zai-org/GLM-5(-FP8), per-expert keys, bf16 weights
(the router bias fp32), or block-FP8 (e4m3 + fp32 weight_scale_inv per
128x128 block, the multiplier) with the GLM-5-FP8 modules_to_not_convert.

safetensors files are written directly (safetensors_raw.py: 8-byte header
length, JSON header, raw little-endian data) so that export needs nothing
beyond torch.
"""
import json
import os

import torch

import safetensors_raw
from model import Moe

# As in GLM-5-FP8's quantization_config, including its "indexers_proj"
# misspelling (the real weights_proj tensor stays bf16 either way).
MODULES_NOT_CONVERTED = ["input_layernorm", "post_attention_layernorm", "q_a_layernorm", "kv_a_layernorm",
                         "model.norm", "mlp.gate", "mlp.gate.e_score_correction_bias", "self_attn.indexer.k_norm",
                         "self_attn.indexers_proj", "lm_head", "model.embed_tokens"]
E4M3_MAX = 448.0


def layer_tensors(out, prefix, rest, t, moe):
    """One decoder-layer parameter `rest` (model.py naming) into `out` under
    checkpoint names: per-expert keys, the router as mlp.gate."""
    if moe and rest.startswith("mlp.") and not rest.startswith("mlp.shared"):
        field = rest[len("mlp."):]
        if field == "gate_weight":
            out[prefix + "mlp.gate.weight"] = t
        elif field == "e_score_correction_bias":
            out[prefix + "mlp.gate.e_score_correction_bias"] = t
        else:
            for e in range(t.shape[0]):
                out[f"{prefix}mlp.experts.{e}.{field}.weight"] = t[e].contiguous()
        return
    out[prefix + rest] = t


def hf_tensors(model):
    """name -> fp32 tensor (CPU), in checkpoint naming."""
    out = {}
    for name, t in model.state_dict().items():
        t = t.detach().float().cpu()
        if name.endswith(".load"):
            continue
        if name.startswith("layers."):
            i = int(name.split(".")[1])
            rest = name.split(".", 2)[2]
            layer_tensors(out, f"model.layers.{i}.", rest, t, isinstance(model.layers[i].mlp, Moe))
        elif name == "lm_head.weight":
            out[name] = t
        else:
            out["model." + name] = t
    return out


# The MTP layer's own modules stay bf16 in GLM-5-FP8 (dsa-spec.md §1.2).
MTP_NOT_CONVERTED = ["eh_proj", "enorm", "hnorm", "shared_head"]
MTP_NAMES = {"enorm.weight": "enorm.weight", "hnorm.weight": "hnorm.weight", "eh_proj.weight": "eh_proj.weight",
             "head_norm.weight": "shared_head.norm.weight"}


def mtp_tensors(mtp):
    """The MTP layer (model.MtpLayer) as model.layers.{num_hidden_layers}.*,
    GLM-5's naming: no embed_tokens or shared_head.head (the main ones)."""
    out = {}
    prefix = f"model.layers.{mtp.c['num_hidden_layers']}."
    for name, t in mtp.state_dict().items():
        t = t.detach().float().cpu()
        if name.endswith(".load"):
            continue
        if name.startswith("block."):
            layer_tensors(out, prefix, name[len("block."):], t, True)
        else:
            out[prefix + MTP_NAMES[name]] = t
    return out


def load_mtp_into(mtp, tensors):
    """Loads an exported MTP layer (fp32 after dequantization) into model.MtpLayer."""
    prefix = f"model.layers.{mtp.c['num_hidden_layers']}."
    new = {}
    for name, t in mtp.state_dict().items():
        if name.endswith(".load"):
            new[name] = t
            continue
        if name.startswith("block."):
            rest = name[len("block."):]
            field = rest[len("mlp."):] if rest.startswith("mlp.") and not rest.startswith("mlp.shared") else None
            if field == "gate_weight":
                new[name] = tensors[prefix + "mlp.gate.weight"]
            elif field == "e_score_correction_bias":
                new[name] = tensors[prefix + "mlp.gate.e_score_correction_bias"]
            elif field is not None:
                new[name] = torch.stack([tensors[f"{prefix}mlp.experts.{e}.{field}.weight"] for e in range(t.shape[0])])
            else:
                new[name] = tensors[prefix + rest]
        else:
            new[name] = tensors[prefix + MTP_NAMES[name]]
    mtp.load_state_dict({k: v.float() for k, v in new.items()})


def quantizable(name, t):
    if t.dim() != 2:
        return False
    return not any(s in name for s in ("embed_tokens", "lm_head", "mlp.gate.weight", "indexer.weights_proj", "eh_proj"))


def quantize_fp8_blocks(w):
    """(e4m3 values, fp32 scale_inv [ceil(r/128), ceil(c/128)]) as spar's
    QuantizeFp8Blocks: scale = max(amax, 1e-4) / 448 per block."""
    rows, cols = w.shape
    sr, sc = (rows + 127) // 128, (cols + 127) // 128
    padded = torch.zeros(sr * 128, sc * 128)
    padded[:rows, :cols] = w
    blocks = padded.view(sr, 128, sc, 128)
    amax = blocks.abs().amax(dim=(1, 3))
    scale = amax.clamp(min=1e-4) / E4M3_MAX
    q = (blocks / scale[:, None, :, None]).view(sr * 128, sc * 128)[:rows, :cols]
    return q.to(torch.float8_e4m3fn), scale.float()


def dequantize_fp8_blocks(q, scale):
    rows, cols = q.shape
    full = scale.repeat_interleave(128, 0)[:rows].repeat_interleave(128, 1)[:, :cols]
    return q.float() * full


DTYPE_NAMES = {torch.bfloat16: "BF16", torch.float32: "F32"}


def tensor_bytes(t):
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().tobytes()
    if t.dtype == torch.float32:
        return t.contiguous().numpy().tobytes()
    return t.contiguous().view(torch.uint8).numpy().tobytes()  # float8_e4m3fn


def write_safetensors(path, tensors):
    safetensors_raw.write(path, {name: (DTYPE_NAMES.get(t.dtype, "F8_E4M3"), list(t.shape), tensor_bytes(t))
                                 for name, t in tensors.items()})


def config_json(c, eos_ids, pad_id, fp8, mtp=False):
    n = c["num_hidden_layers"]
    j = {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "model_type": "glm_moe_dsa",
        "vocab_size": c["vocab_size"],
        "hidden_size": c["hidden_size"],
        "intermediate_size": c["intermediate_size"],
        "moe_intermediate_size": c["moe_intermediate_size"],
        "num_hidden_layers": n,
        "num_attention_heads": c["num_attention_heads"],
        "num_key_value_heads": c["num_attention_heads"],
        "num_nextn_predict_layers": 1 if mtp else 0,
        "q_lora_rank": c["q_lora_rank"],
        "kv_lora_rank": c["kv_lora_rank"],
        "qk_nope_head_dim": c["qk_nope_head_dim"],
        "qk_rope_head_dim": c["qk_rope_head_dim"],
        "v_head_dim": c["v_head_dim"],
        "head_dim": c["qk_rope_head_dim"],
        "index_n_heads": c["index_n_heads"],
        "index_head_dim": c["index_head_dim"],
        "index_topk": c["index_topk"],
        "rope_interleave": True,
        "indexer_rope_interleave": True,
        "indexer_types": ["full"] * n,
        "rope_parameters": {"rope_theta": c["rope_parameters"]["rope_theta"], "rope_type": "default"},
        "n_routed_experts": c["n_routed_experts"],
        "n_shared_experts": c["n_shared_experts"],
        "num_experts_per_tok": c["num_experts_per_tok"],
        "n_group": 1,
        "topk_group": 1,
        "routed_scaling_factor": c["routed_scaling_factor"],
        "norm_topk_prob": True,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "first_k_dense_replace": c["first_k_dense_replace"],
        "moe_layer_freq": 1,
        "mlp_layer_types": ["dense" if i < c["first_k_dense_replace"] else "sparse" for i in range(n)],
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "rms_norm_eps": c["rms_norm_eps"],
        "max_position_embeddings": c["max_position_embeddings"],
        "eos_token_id": eos_ids,
        "pad_token_id": pad_id,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
        "use_cache": True,
    }
    if fp8:
        j["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                    "weight_block_size": [128, 128],
                                    "modules_to_not_convert": MODULES_NOT_CONVERTED + (MTP_NOT_CONVERTED if mtp else [])}
    return j


def export(model, out_dir, fp8, eos_ids, pad_id, tokenizer_dir, mtp=None):
    """Writes config.json, model.safetensors, generation_config.json and
    copies tokenizer.json / tokenizer_config.json from tokenizer_dir; with
    `mtp` (model.MtpLayer) also the multi-token-prediction layer."""
    os.makedirs(out_dir, exist_ok=True)
    tensors = {}
    named = hf_tensors(model)
    if mtp is not None:
        named.update(mtp_tensors(mtp))
    for name, t in named.items():
        if name.endswith("e_score_correction_bias"):
            tensors[name] = t.float()
        elif fp8 and quantizable(name, t):
            q, s = quantize_fp8_blocks(t)
            tensors[name] = q
            tensors[name + "_scale_inv"] = s
        else:
            tensors[name] = t.to(torch.bfloat16)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config_json(model.c, eos_ids, pad_id, fp8, mtp is not None), f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": eos_ids, "pad_token_id": pad_id, "do_sample": False}, f, indent=2)
        f.write("\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(tokenizer_dir, name), "rb") as src, open(os.path.join(out_dir, name), "wb") as dst:
            dst.write(src.read())


def load_exported_into(model, tensors):
    """Loads checkpoint tensors (fp32 after dequantization) into the torch
    model, so verification runs exactly the shipped weights."""
    sd = model.state_dict()
    new = {}
    for name in sd:
        if name.endswith(".load"):
            new[name] = sd[name]
            continue
        if name.startswith("layers."):
            i = int(name.split(".")[1])
            rest = name.split(".", 2)[2]
            prefix = f"model.layers.{i}."
            if isinstance(model.layers[i].mlp, Moe) and rest.startswith("mlp.") and not rest.startswith("mlp.shared"):
                field = rest[len("mlp."):]
                if field == "gate_weight":
                    new[name] = tensors[prefix + "mlp.gate.weight"]
                elif field == "e_score_correction_bias":
                    new[name] = tensors[prefix + "mlp.gate.e_score_correction_bias"]
                else:
                    new[name] = torch.stack([tensors[f"{prefix}mlp.experts.{e}.{field}.weight"]
                                             for e in range(sd[name].shape[0])])
                continue
            new[name] = tensors[prefix + rest]
        elif name == "lm_head.weight":
            new[name] = tensors[name]
        else:
            new[name] = tensors["model." + name]
    model.load_state_dict({k: v.float() for k, v in new.items()})


def read_safetensors(path):
    """name -> fp32 tensor, FP8 weights dequantized with their scales."""
    raw = {}
    for name, (dtype, shape, data) in safetensors_raw.read(path).items():
        buf = bytearray(data)
        if dtype == "BF16":
            t = torch.frombuffer(buf, dtype=torch.int16).view(torch.bfloat16)
        elif dtype == "F32":
            t = torch.frombuffer(buf, dtype=torch.float32)
        else:
            t = torch.frombuffer(buf, dtype=torch.uint8).view(torch.float8_e4m3fn)
        raw[name] = t.reshape(shape)
    out = {}
    for name, t in raw.items():
        if name.endswith("_scale_inv"):
            continue
        if name + "_scale_inv" in raw:
            out[name] = dequantize_fp8_blocks(t, raw[name + "_scale_inv"])
        else:
            out[name] = t.float()
    return out
