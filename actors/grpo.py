"""GRPO core: pure functions from a batch of groups to a loss (numpy for the bookkeeping, torch for the loss).

A step's batch is G samples for each of P prompts. Advantages are group-relative: each sample's reward
minus its group's mean, optionally divided by the group's std; groups whose samples all got the same
reward carry no signal and may be dropped. The loss is the token-level clipped surrogate (every
response token of the whole batch weighs the same) against the behaviour logprobs the samples were
drawn with, plus an optional k3 KL to a reference model.

Negative weight (``grpo.negative_weight``, 1 = GRPO): negative advantages are multiplied by it after the
group normalisation. Pushing failed samples down spreads their probability over the other tokens (the
policy's entropy rises); pulling valid ones up sharpens it towards them, which is what greedy decoding
reads (Zhu et al. 2025, "The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning": positive
samples lift pass@1, negative ones keep pass@k). Below 1 the step leans on its valid samples. On the
shipped base it did not stop the entropy's rise nor lift the benchmark (docs/results.md).

Credit (``grpo.credit``): with ``sequence`` every token of a sample gets its advantage. With ``located``,
a failing sample whose advantage is negative and whose verdict names a place (``env.locate.fault_offset``:
the failing agent's first faulty move, in the think block's path or the answer line, whichever comes
first) gets it only on the tokens that end after that character offset, i.e. the token holding the
fault and everything after it; the correct prefix gets 0 (it is neither pushed down nor up). A failing
sample with a positive advantage (only possible when invalid plans earn graded rewards, e.g.
``reward.progress``) gets it only on the tokens that end at or before that offset: its correct prefix is
pulled up, its fault and what follows are not. Valid samples, and failures without a place (parse errors,
wrong agent count), stay sequence-level.

Shared prompts (``grpo.shared_prompts``, on by default): a group's G samples share one prompt, and on this
benchmark the prompt is most of a sequence (~88 of ~123 tokens). ``collate(..., share_prompts=True)`` keeps
each distinct prompt of a micro-batch once; ``token_logprobs`` runs the prompts, then the responses on
their prompt's cached keys and values (gradients flow through the cache), so a prompt is computed once
per micro-batch instead of once per sample. The logprobs and gradients are the same as the plain path's
(tests/test_grpo.py); ``shared_micro_batches`` keeps a group's rows together in one micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def group_advantages(rewards: np.ndarray, groups: np.ndarray, scale_by_std: bool, eps: float = 1e-6) -> np.ndarray:
    """Reward minus the group mean (over samples sharing a group id), divided by the group std if asked."""
    rewards = np.asarray(rewards, dtype=np.float64)
    advantages = np.zeros_like(rewards)
    for group in np.unique(groups):
        members = groups == group
        centred = rewards[members] - rewards[members].mean()
        advantages[members] = centred / (rewards[members].std() + eps) if scale_by_std else centred
    return advantages


def weigh_negatives(advantages: np.ndarray, negative_weight: float) -> np.ndarray:
    """Negative advantages times ``negative_weight`` (positive ones unchanged)."""
    advantages = np.asarray(advantages, dtype=np.float64)
    return np.where(advantages < 0, advantages * negative_weight, advantages)


def informative_groups(rewards: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Mask of samples whose group has any reward variance."""
    rewards = np.asarray(rewards)
    keep = np.zeros(len(rewards), dtype=bool)
    for group in np.unique(groups):
        members = groups == group
        keep[members] = rewards[members].max() > rewards[members].min()
    return keep


@dataclass
class SharedPrompts:
    """The distinct prompts of a micro-batch, each once, right-padded."""

    ids: torch.Tensor  # [U, P]
    attention_mask: torch.Tensor  # [U, P]
    lengths: torch.Tensor  # [U]: real tokens of each prompt
    of_row: torch.Tensor  # [B]: which prompt each row's response continues


@dataclass
class MicroBatch:
    """Right-padded ``prompt + response`` sequences; per-token tensors cover the response positions.
    With ``prompts`` set, ``input_ids`` and ``attention_mask`` hold only the responses [B, R], which
    continue their prompt's cached keys and values (``target_index`` is then unused)."""

    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    target_index: torch.Tensor  # [B, R]: position whose logits predict each response token
    response_ids: torch.Tensor  # [B, R]
    response_mask: torch.Tensor  # [B, R] float, 0 on padding (and on zero-weight rows)
    old_logprobs: torch.Tensor  # [B, R]
    advantages: torch.Tensor  # [B, R] per response token (a sequence-level advantage repeated)
    prompts: SharedPrompts | None = None


def collate(
    prompts: list[list[int]],
    responses: list[list[int]],
    old_logprobs: list[list[float]] | None,
    advantages: list[float | list[float]] | None,
    pad_id: int,
    weights: list[float] | None = None,
    share_prompts: bool = False,
) -> MicroBatch:
    """Pad a list of samples into a ``MicroBatch`` (a weight of 0 keeps a row out of the loss). A sample's
    advantage is one number (every token) or one per response token. ``share_prompts``: each distinct
    prompt once (see the module doc)."""
    if share_prompts:
        distinct = list(dict.fromkeys(tuple(p) for p in prompts))
        batch = collate([[]] * len(prompts), responses, old_logprobs, advantages, pad_id, weights)
        ids = collate([list(p) for p in distinct], [[]] * len(distinct), None, None, pad_id)
        index = {p: k for k, p in enumerate(distinct)}
        batch.prompts = SharedPrompts(
            ids.input_ids,
            ids.attention_mask,
            torch.tensor([len(p) for p in distinct]),
            torch.tensor([index[tuple(p)] for p in prompts]),
        )
        return batch
    batch = len(prompts)
    length = max(len(p) + len(r) for p, r in zip(prompts, responses))
    width = max(max(len(r) for r in responses), 1)
    input_ids = torch.full((batch, length), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, length), dtype=torch.long)
    target_index = torch.zeros((batch, width), dtype=torch.long)
    response_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, width))
    old = torch.zeros((batch, width))
    adv = torch.zeros((batch, width))
    for row, (prompt, response) in enumerate(zip(prompts, responses)):
        sequence = prompt + response
        input_ids[row, : len(sequence)] = torch.tensor(sequence)
        attention[row, : len(sequence)] = 1
        n = len(response)
        target_index[row, :n] = torch.arange(len(prompt) - 1, len(prompt) - 1 + n)
        response_ids[row, :n] = torch.tensor(response, dtype=torch.long)
        mask[row, :n] = 1.0 if weights is None else weights[row]
        if old_logprobs is not None:
            old[row, :n] = torch.tensor(old_logprobs[row][:n])
        if advantages is not None:
            given = advantages[row]
            adv[row, :n] = torch.tensor(given[:n]) if isinstance(given, list) else float(given)
    return MicroBatch(input_ids, attention, target_index, response_ids, mask, old, adv)


def shared_micro_batches(rows, prompt_of: dict[int, tuple], size: int, rank: int, world: int) -> list[list[int]]:
    """This rank's micro-batches under shared prompts: rows of one prompt stay together (a group larger
    than ``size`` is cut into pieces of ``size``), longest prompt first (little padding), the pieces go
    to the ranks in turn, and a micro-batch takes pieces while it has room for ``size`` rows. Every rank
    gets the same number of micro-batches (empty ones at the end: the caller keeps them in step with a
    zero-weight row)."""
    groups: dict[tuple, list[int]] = {}
    for row in rows:
        groups.setdefault(prompt_of[int(row)], []).append(int(row))
    ordered = sorted(groups.items(), key=lambda item: -len(item[0]))  # stable: ties keep row order
    pieces = [members[k : k + size] for _, members in ordered for k in range(0, len(members), size)]
    plans = []
    for r in range(world):
        plan: list[list[int]] = []
        for piece in pieces[r::world]:
            if plan and len(plan[-1]) + len(piece) <= size:
                plan[-1] += piece
            else:
                plan.append(list(piece))
        plans.append(plan)
    count = max(1, max(len(plan) for plan in plans))
    return plans[rank] + [[] for _ in range(count - len(plans[rank]))]


def by_length(rows, lengths: dict[int, int]) -> list[int]:
    """``rows`` longest sequence first (ties in row order), so consecutive micro-batches hold sequences of
    about one length and little padding is computed (the loss is a token sum: order does not change it)."""
    return sorted((int(row) for row in rows), key=lambda row: -lengths[row])


def token_logprobs(model, batch: MicroBatch, entropy: bool = False):
    """Log-probabilities [B, R] the model gives each response token (raw logits, no temperature); with
    ``entropy``, also the entropy [B, R] of the model's distribution at each response position."""
    picked = _predicting_logits(model, batch).float()  # [B, R, V] at the predicting positions
    normaliser = picked.logsumexp(-1)
    logprobs = picked.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1) - normaliser
    if not entropy:
        return logprobs
    with torch.no_grad():
        probabilities = torch.softmax(picked, -1)
        entropies = normaliser - (probabilities * picked).sum(-1)
    return logprobs, entropies


def _predicting_logits(model, batch: MicroBatch) -> torch.Tensor:
    """Logits [B, R, V] of the positions that predict each response token."""
    if batch.prompts is None:
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        return logits.gather(1, batch.target_index.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
    prompts, of_row = batch.prompts, batch.prompts.of_row
    ran = model(input_ids=prompts.ids, attention_mask=prompts.attention_mask, use_cache=True)
    first = torch.arange(len(prompts.lengths), device=of_row.device)
    last = ran.logits[first, prompts.lengths - 1]  # [U, V]: each prompt's last position predicts token 0
    cache = ran.past_key_values
    cache.batch_select_indices(of_row)  # [U, ...] -> [B, ...], differentiable
    width = batch.input_ids.shape[1]
    responses = model(
        input_ids=batch.input_ids,
        attention_mask=torch.cat([prompts.attention_mask[of_row], batch.attention_mask], 1),
        position_ids=prompts.lengths[of_row, None] + torch.arange(width, device=of_row.device),
        past_key_values=cache,
    ).logits  # [B, R, V]: position k predicts response token k + 1
    return torch.cat([last[of_row, None], responses[:, :-1]], 1)


def token_ends(decode, response_ids: list[int]) -> list[int]:
    """The character offset where each response token ends in the decoded text (``decode(ids) -> str``,
    the tokenizer's decode as the engine detokenizes: special tokens skipped)."""
    return [len(decode(response_ids[: k + 1])) for k in range(len(response_ids))]


def located_advantages(advantage: float, ends: list[int], fault: int | None) -> list[float] | float:
    """A sample's advantage under located credit (see the module doc): per token when a failing sample has a
    located fault (a negative advantage from the fault on, a positive one before it), else the sequence-level
    number."""
    if fault is None or advantage == 0:
        return advantage
    if advantage < 0:
        return [advantage if end > fault else 0.0 for end in ends]
    return [advantage if end <= fault else 0.0 for end in ends]


def clipped_surrogate(
    new_logprobs: torch.Tensor,
    batch: MicroBatch,
    clip_low: float,
    clip_high: float,
    reference_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Sum over response tokens of the clipped policy loss (+ kl_coef x k3 KL); the caller divides by the
    batch's token count. Returns (loss sum, statistics summed over tokens)."""
    mask = batch.response_mask
    ratio = torch.exp(new_logprobs - batch.old_logprobs)
    advantage = batch.advantages
    unclipped = ratio * advantage
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantage
    per_token = -torch.minimum(unclipped, clipped)
    stats = {
        "clipped_tokens": float(((unclipped != clipped).float() * (mask > 0)).sum()),
        "ratio_sum": float((ratio.detach() * (mask > 0)).sum()),
        "logprob_gap_sum": float(((new_logprobs.detach() - batch.old_logprobs).abs() * (mask > 0)).sum()),
        "kl_sum": 0.0,
    }
    if reference_logprobs is not None and kl_coef > 0:
        delta = reference_logprobs - new_logprobs
        kl = torch.exp(delta) - delta - 1.0
        per_token = per_token + kl_coef * kl
        stats["kl_sum"] = float((kl.detach() * (mask > 0)).sum())
    return (per_token * mask).sum(), stats


def sft_loss_sum(new_logprobs: torch.Tensor, batch: MicroBatch) -> torch.Tensor:
    """Summed negative log-likelihood of the (weighted) response tokens."""
    return -(new_logprobs * batch.response_mask).sum()
