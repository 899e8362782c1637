"""Tokenized pools of conversations and the batches drawn from them.

A conversation (data.conversation_segments) is tokenized segment by
segment; label[t] is the next token when that token belongs to a target
segment, else -100, so the loss covers only assistant answers and the
<|user|> that ends them.
"""
import random

import torch


class Pool:
    def __init__(self, tok, conversations, pad_id):
        """conversations: list of segment lists."""
        texts = [t for segs in conversations for t, _ in segs]
        encoded = tok.encode_batch(texts, add_special_tokens=False)
        self.ids, self.labels = [], []
        k = 0
        for segs in conversations:
            ids, target = [], []
            for _, is_target in segs:
                piece = encoded[k].ids
                k += 1
                ids += piece
                target += [is_target] * len(piece)
            labels = [ids[t + 1] if target[t + 1] else -100 for t in range(len(ids) - 1)] + [-100]
            self.ids.append(ids)
            self.labels.append(labels)
        self.pad_id = pad_id
        self.order = sorted(range(len(self.ids)), key=lambda i: len(self.ids[i]))
        self.device = None

    def __len__(self):
        return len(self.ids)

    def lengths(self):
        return [len(x) for x in self.ids]

    def to(self, device):
        """Pads the whole pool once and keeps it on `device`: a batch is then
        one gather, with no per-step host work or copies."""
        n = max(len(x) for x in self.ids)
        ids = torch.full((len(self.ids), n), self.pad_id, dtype=torch.int32)
        labels = torch.full((len(self.ids), n), -100, dtype=torch.int32)
        for r, (x, y) in enumerate(zip(self.ids, self.labels)):
            ids[r, :len(x)] = torch.tensor(x, dtype=torch.int32)
            labels[r, :len(y)] = torch.tensor(y, dtype=torch.int32)
        self.all_ids, self.all_labels = ids.to(device), labels.to(device)
        self.all_lens = torch.tensor(self.lengths())
        self.device = device
        return self

    def batch(self, rng, count=None, token_budget=None, device="cpu", shortest=1.0):
        """count random conversations, or a run of similar lengths (sorted
        order) filling token_budget padded tokens, starting among the
        `shortest` fraction of the pool (a length curriculum). Returns ids,
        labels (int64) and lengths."""
        if count is not None:
            picks = [rng.randrange(len(self.ids)) for _ in range(count)]
        else:
            start = rng.randrange(max(1, int(len(self.order) * min(1.0, shortest))))
            picks, longest = [], 0
            for j in range(start, start + len(self.order)):
                i = self.order[j % len(self.order)]
                longest2 = max(longest, len(self.ids[i]))
                if picks and longest2 * (len(picks) + 1) > token_budget:
                    break
                picks.append(i)
                longest = longest2
        lens = self.all_lens[picks] if self.device is not None else torch.tensor([len(self.ids[i]) for i in picks])
        n = int(lens.max())
        if self.device is not None:
            idx = torch.tensor(picks, device=self.device)
            return (self.all_ids[idx, :n].long(), self.all_labels[idx, :n].long(), lens.to(self.device))
        ids = torch.full((len(picks), n), self.pad_id, dtype=torch.long)
        labels = torch.full((len(picks), n), -100, dtype=torch.long)
        for r, i in enumerate(picks):
            ids[r, :len(self.ids[i])] = torch.tensor(self.ids[i])
            labels[r, :len(self.labels[i])] = torch.tensor(self.labels[i])
        return ids.to(device), labels.to(device), lens.to(device)


def check_segment_tokenization(tok, conversations, count=200):
    """Tokenizing segments separately must equal tokenizing the whole text."""
    for segs in conversations[:count]:
        whole = tok.encode("".join(t for t, _ in segs), add_special_tokens=False).ids
        parts = []
        for t, _ in segs:
            parts += tok.encode(t, add_special_tokens=False).ids
        if whole != parts:
            raise RuntimeError("segment tokenization differs from whole-text tokenization for: " +
                               repr("".join(t for t, _ in segs))[:300])


def make_rng(seed):
    return random.Random(seed)


def recall_guide(ids, labels, value_ids, value_first=False, period_id=None):
    """Where recall answers should look: for every answer position t whose
    label is a recall VALUE (the answer "... KEY is" -> VALUE), the planted
    fact's position: with the key first, the earlier positions j holding the
    same "KEY is VALUE" (ids[j] = VALUE, ids[j-1] = ids[t] = "is", ids[j-2]
    = ids[t-1] = KEY); with the value first ("VALUE is the password of
    KEY."), the fact's KEY token (ids[j] = ids[t-1], ids[j+1] = period,
    ids[j-5] a value).
    Returns (batch rows [N], query positions [N], targets [N, S] bool) for
    the rows that have such a fact, or None."""
    vals = torch.tensor(sorted(value_ids), device=ids.device)
    b, t = torch.isin(labels, vals).nonzero(as_tuple=True)
    keep = t >= 1
    b, t = b[keep], t[keep]
    if len(b) == 0:
        return None
    row = ids[b]
    s = row.shape[1]
    before1 = torch.nn.functional.pad(row, (1, 0), value=-1)[:, :s]
    before2 = torch.nn.functional.pad(row, (2, 0), value=-1)[:, :s]
    pos = torch.arange(s, device=ids.device)[None]
    if value_first:
        # "VALUE is the password of KEY.": VALUE five tokens before KEY
        # (a question "Tell me the password of KEY." has no value there).
        after1 = torch.nn.functional.pad(row, (0, 1), value=-1)[:, 1:]
        before5 = torch.nn.functional.pad(row, (5, 0), value=-1)[:, :s]
        target = ((row == ids[b, t - 1][:, None]) & (after1 == period_id) & torch.isin(before5, vals) &
                  (pos < t[:, None]))
    else:
        target = ((row == labels[b, t][:, None]) & (before1 == ids[b, t][:, None]) &
                  (before2 == ids[b, t - 1][:, None]) & (pos < t[:, None]))
    found = target.any(-1)
    if not bool(found.any()):
        return None
    return b[found], t[found], target[found]
