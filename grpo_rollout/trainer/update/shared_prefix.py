"""Each group's shared prompt forwarded once (``training.shared_prefix``): the layout and the check on the model.

The ``num_generations`` completions of a group share their prompt, and an agent's sequences often share a long system
prompt; today's layout (:func:`~.logprobs.pack`) forwards that prompt once per sequence. :func:`pack_shared` lays out
sequences that share a prefix of token ids as ONE unit: the prefix once, then each member's remaining tokens one after
another, with ``position_ids`` continuing from the prefix length for each member, and a 4D boolean attention mask in
which a member's tokens see the prefix and their own earlier tokens only (the prefix is causal, as before). Each
completion token's log-prob is read from the hidden state that predicts it (in the prefix when the token follows it
directly), so the values, the loss and the gradients are today's up to float rounding; the gradient of the prefix is
the sum over its members, as it was over their copies.

Which sequences share: in order, a sequence joins the unit whose longest common prefix with it saves the most tokens
(``m·L' > (m-1)·L`` for a unit of ``m`` members sharing ``L`` tokens, ``L'`` the prefix left with it), else it starts
a unit of its own; the prefix is always what every member really has in common (a whole prompt for a group, the
system prompt for an agent's sequences of different episodes, more for the later turns of one episode).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import torch

from .logprobs import PackedBatch, completion_logprobs, pack

#: Attention implementations that take a custom 4D mask with ``position_ids`` (checked on the model, too).
MASKED_ATTENTION = ("sdpa", "eager")


@dataclass
class _Unit:
    members: List[int]
    prefix: int  # tokens every member shares (a unit of one: its whole sequence)
    first: List[int] = field(default_factory=list)  # the first member's tokens

    def tokens(self, seqs: Sequence[List[int]]) -> int:
        return self.prefix + sum(len(seqs[i]) - self.prefix for i in self.members)


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for k in range(n):
        if a[k] != b[k]:
            return k
    return n


def share_units(seqs: Sequence[List[int]]) -> List[_Unit]:
    """Group ``seqs`` (token-id lists) into units that share a prefix (greedy, in order; see the module's note)."""
    units: List[_Unit] = []
    for i, q in enumerate(seqs):
        best, best_gain, best_len = None, 0, 0
        for u in units:
            common = min(u.prefix, _common(u.first, q))
            gain = len(u.members) * common - (len(u.members) - 1) * u.prefix
            if gain > best_gain:
                best, best_gain, best_len = u, gain, common
        if best is None:
            units.append(_Unit([i], len(q), list(q)))
        else:
            best.members.append(i)
            best.prefix = best_len
    return units


def pack_shared(prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]],
                pad_id: int) -> PackedBatch:
    """Lay out ``B`` (prompt, completion) pairs with each shared prefix once (see the module's note).

    Units are packed first-fit-decreasing into rows as wide as the longest unit. The result's ``attention_mask`` is
    ``(R, 1, T, T)`` bool (True: may attend; a padding position sees itself only), ``position_ids`` ``(R, T)``, and
    ``completion_cols`` ``(B, C)`` the column of the row whose hidden state predicts each completion token;
    ``num_tokens`` counts the tokens forwarded (each prefix once).
    """
    seqs = [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids)]
    units = share_units(seqs)
    b, width = len(seqs), max(u.tokens(seqs) for u in units)
    placed, fill = [], []  # (row, offset) of each unit; tokens used in each row
    for k in sorted(range(len(units)), key=lambda k: -units[k].tokens(seqs)):
        n = units[k].tokens(seqs)
        r = next((r for r, used in enumerate(fill) if used + n <= width), len(fill))
        if r == len(fill):
            fill.append(0)
        placed.append((k, r, fill[r]))
        fill[r] += n
    rows = len(fill)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    positions = torch.zeros((rows, width), dtype=torch.long)
    mask = torch.eye(width, dtype=torch.bool).repeat(rows, 1, 1, 1)  # padding sees itself (no empty softmax row)
    c_width = max(1, max(len(c) for c in completion_ids))
    cols = torch.zeros((b, c_width), dtype=torch.long)
    row = torch.zeros(b, dtype=torch.long)
    for k, r, o in placed:
        u = units[k]
        L = u.prefix
        input_ids[r, o:o + L] = torch.tensor(u.first[:L], dtype=torch.long)
        positions[r, o:o + L] = torch.arange(L)
        mask[r, 0, o:o + L, o:o + L] = torch.ones(L, L, dtype=torch.bool).tril()
        s = o + L  # where the next member's own tokens start
        for i in u.members:
            n = len(seqs[i]) - L
            input_ids[r, s:s + n] = torch.tensor(seqs[i][L:], dtype=torch.long)
            positions[r, s:s + n] = torch.arange(L, L + n)
            mask[r, 0, s:s + n, o:o + L] = True
            mask[r, 0, s:s + n, s:s + n] = torch.ones(n, n, dtype=torch.bool).tril()
            q = len(prompt_ids[i]) - 1 + torch.arange(len(completion_ids[i]))  # sequence position predicting each
            cols[i, :q.numel()] = torch.where(q < L, o + q, s + q - L)
            row[i] = r
            s += n
    valid = torch.zeros((b, c_width), dtype=torch.long)
    comp = torch.zeros((b, c_width), dtype=torch.long)
    for i, c in enumerate(completion_ids):
        if c:
            comp[i, :len(c)] = torch.tensor(list(c), dtype=torch.long)
            valid[i, :len(c)] = 1
    return PackedBatch(input_ids, mask, positions, row, cols[:, 0] + 1, comp, valid,
                       sum(u.tokens(seqs) for u in units), completion_cols=cols)


def shared_prefix_unsupported(lm: torch.nn.Module) -> Optional[str]:
    """Why ``lm`` cannot take :func:`pack_shared`'s layout (``None``: it can).

    Its attention implementation must be one of :data:`MASKED_ATTENTION` (flash attention takes no 4D mask), and
    the mask must really be applied: two completions after one prompt, shared and each with its own copy, give the
    same log-probs (run once, without gradients or dropout).
    """
    config = getattr(lm, "config", None)
    impl = getattr(config, "_attn_implementation", None)
    if impl not in MASKED_ATTENTION:
        return (f"its attention implementation {impl!r} cannot take a custom 4D attention mask (supported: "
                f"{', '.join(MASKED_ATTENTION)})")
    vocab = lm.get_input_embeddings().num_embeddings
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, vocab, (5,), generator=gen).tolist()
    completions = torch.randint(0, vocab, (2, 4), generator=gen).tolist()
    training = lm.training
    try:
        with torch.no_grad():
            lm.eval()  # no dropout: both layouts must see the same network
            shared = completion_logprobs(lm, pack_shared([prompt, prompt], completions, 0))
            apart = completion_logprobs(lm, pack([prompt, prompt], completions, 0))
    except (TypeError, ValueError, RuntimeError) as e:
        return f"its forward pass refused a 4D attention mask with position_ids ({type(e).__name__}: {e})"
    finally:
        lm.train(training)
    if not torch.allclose(shared, apart, rtol=1e-3, atol=1e-3):
        return "it ignores a custom 4D attention mask (a completion saw the one laid out before it)"
    return None
