"""Transformers' own GlmMoeDsaForCausalLM on the exported checkpoints:
  * parity: its logits against the torch training model loaded from the
    same files (so the training code's math is transformers' math);
  * goldens: tools/golden/make_goldens.py's records (logits, per-layer top-k
    sets, greedy continuations through transformers' KV cache, a dense
    control) on real chat prompts, for spar's golden test.
FP8 checkpoints are dequantized to a float32 copy first, as make_goldens.py
does (transformers 5.17's FP8 path needs dims that are multiples of 128).
"""
import os
import shutil
import sys
import tempfile

import torch

import export
from model import TinyGlm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
import make_goldens  # noqa: E402


def float_copy(src_dir):
    """A float32 copy of an exported checkpoint (FP8 dequantized)."""
    import json
    dst = tempfile.mkdtemp()
    tensors = export.read_safetensors(os.path.join(src_dir, "model.safetensors"))
    export.write_safetensors(os.path.join(dst, "model.safetensors"), tensors)
    for name in os.listdir(src_dir):
        if name != "model.safetensors":
            shutil.copy(os.path.join(src_dir, name), os.path.join(dst, name))
    cfg = json.load(open(os.path.join(dst, "config.json")))
    cfg.pop("quantization_config", None)
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
    return dst, tensors


def torch_model_from(tensors, config, device):
    m = TinyGlm(config)
    export.load_exported_into(m, tensors)
    return m.to(device).eval()


@torch.no_grad()
def parity(ckpt_dir, config, prompts, device):
    """Max |logit difference| relative to max |logit|, per prompt."""
    import transformers
    tmp, tensors = float_copy(ckpt_dir)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # full fp32 on both sides
    hf = transformers.GlmMoeDsaForCausalLM.from_pretrained(tmp, dtype=torch.float32,
                                                           attn_implementation="eager").to(device).eval()
    ours = torch_model_from(tensors, config, device)
    results = []
    for ids in prompts:
        x = torch.tensor([ids], device=device)
        a = hf(input_ids=x).logits[0].float()
        b = ours(x, mode="sparse")[0].float()
        d = (a - b).abs().max().item() / a.abs().max().item()
        agree = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
        results.append({"tokens": len(ids), "max_rel_logit_diff": d, "argmax_agreement": agree})
    del hf
    shutil.rmtree(tmp)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    return results


def goldens(ckpt_dir, prompts, variant):
    """make_goldens.py's JSON for these prompts (token ids)."""
    import transformers
    tmp, _ = float_copy(ckpt_dir)
    torch.manual_seed(0)
    model = make_goldens.load_model(tmp)
    captured = make_goldens.capture_topk(model)
    records = [make_goldens.run_prompt(model, captured, p) for p in prompts]
    dense = make_goldens.load_model(tmp, index_topk=100000)
    longest = max(prompts, key=len)
    with torch.no_grad():
        dl = dense(input_ids=torch.tensor([longest])).logits[0].float()
    n = len(longest)
    last = make_goldens.LOGITS_LAST
    shutil.rmtree(tmp)
    return {
        "variant": variant,
        "fp8_dequantized_by_script": "fp8" in variant,
        "index_topk": model.config.index_topk,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "architecture": type(model).__name__,
        "prompt_seed": None,
        "prompts": records,
        "dense_control": {"ids": longest, "logits_positions": list(range(n - last, n)),
                          "logits": [dl[p].tolist() for p in range(n - last, n)]},
    }
