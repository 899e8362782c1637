"""Greedy answers of the torch model on the evaluation sets (the same sets
the C++ tests run through spar), for the provenance numbers and for
choosing when training is done.

Batched greedy decoding without a KV cache: each row is right-padded, the
next token is read at the row's own last position and written after it;
causal attention keeps padding from influencing real positions.
"""
import torch

import data


@torch.no_grad()
def greedy(model, prompts, max_new, stop_ids, mode="sparse", batch=32, device="cuda", seed=0):
    out = []
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for b0 in range(0, len(prompts), batch):
        chunk = prompts[b0:b0 + batch]
        lens = torch.tensor([len(p) for p in chunk])
        buf = torch.zeros(len(chunk), int(lens.max()) + max_new, dtype=torch.long)
        for r, p in enumerate(chunk):
            buf[r, :len(p)] = torch.tensor(p)
        buf = buf.to(device)
        done = [False] * len(chunk)
        produced = [[] for _ in chunk]
        for _ in range(max_new):
            n = int(lens.max())
            if mode == "random":
                torch.manual_seed(int(torch.randint(0, 2 ** 31, (1,), generator=gen)))
            logits = model(buf[:, :n], mode=mode)
            nxt = logits[torch.arange(len(chunk), device=device), (lens - 1).to(device)].argmax(-1).tolist()
            for r in range(len(chunk)):
                if done[r]:
                    continue
                if nxt[r] in stop_ids:
                    done[r] = True
                    continue
                produced[r].append(nxt[r])
                buf[r, lens[r]] = nxt[r]
                lens[r] += 1
            if all(done):
                break
        out += produced
    return out


def decode(tok, ids):
    return tok.decode(ids, skip_special_tokens=True)


def encode_prompt(tok, messages, enable_thinking=True):
    return tok.encode(data.render_prefix(messages, True, enable_thinking), add_special_tokens=False).ids


def arithmetic_accuracy(model, tok, cases, stop_ids, mode, device):
    prompts = [encode_prompt(tok, [{"role": "user", "content": c["question"]}], c["enable_thinking"]) for c in cases]
    outs = greedy(model, prompts, 8, stop_ids, mode=mode, device=device)
    ok = [decode(tok, o) == c["answer"] for o, c in zip(outs, cases)]
    return sum(ok) / len(ok), [(c["question"], c["answer"], decode(tok, o)) for o, c, g in zip(outs, cases, ok) if not g]


def multi_turn_accuracy(model, tok, cases, stop_ids, mode, device):
    """Each conversation is played with the model's own earlier answers."""
    history = [[] for _ in cases]
    alive = [True] * len(cases)
    for turn in range(max(len(c["turns"]) for c in cases)):
        idx = [i for i, c in enumerate(cases) if alive[i] and turn < len(c["turns"])]
        if not idx:
            break
        prompts = []
        for i in idx:
            history[i].append({"role": "user", "content": cases[i]["turns"][turn]["user"]})
            prompts.append(encode_prompt(tok, history[i]))
        outs = greedy(model, prompts, 8, stop_ids, mode=mode, device=device)
        for i, o in zip(idx, outs):
            text = decode(tok, o)
            history[i].append({"role": "assistant", "content": text})
            if text != cases[i]["turns"][turn]["answer"]:
                alive[i] = False
    return sum(alive) / len(alive)


def recall_accuracy(model, tok, cases, stop_ids, mode, device):
    """Per filler size: fraction answered exactly; and the mean prompt length."""
    prompts = [encode_prompt(tok, [{"role": "user", "content": c["user"]}]) for c in cases]
    outs = greedy(model, prompts, 16, stop_ids, mode=mode, device=device, batch=16)
    by = {}
    for c, p, o in zip(cases, prompts, outs):
        d = by.setdefault(c["sentences"], {"n": 0, "ok": 0, "tokens": 0})
        d["n"] += 1
        d["ok"] += decode(tok, o) == c["answer"]
        d["tokens"] += len(p)
    total = sum(d["ok"] for d in by.values()) / len(cases)
    return total, {k: {"accuracy": v["ok"] / v["n"], "mean_tokens": v["tokens"] / v["n"]} for k, v in sorted(by.items())}
