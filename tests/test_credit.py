"""Verifier-located credit: where a failing answer goes wrong (env.locate), and the token masks GRPO
builds from it (actors.grpo), on hand-made answers; and the entropy the learner logs."""

from pathlib import Path

import torch

from actors.grpo import collate, located_advantages, token_ends, token_logprobs
from env.evaluate import Verdict, evaluate
from env.instance import Instance
from env.locate import fault_offset

SHIPPED = Path(__file__).resolve().parent.parent / "models" / "tiny-test"

# 3x3, a hole at (1, 1); agent 0 from (0, 0) to (2, 2), agent 1 from (2, 0) to (0, 2)
INSTANCE = Instance(id="hand", size=3, holes=[[1, 1]], starts=[[0, 0], [2, 0]], goals=[[2, 2], [0, 2]],
                    optimal_makespan=4, optimal_sum_of_costs=8, requires_wait=False, seed=0,
                    solution=[["RIGHT", "RIGHT", "DOWN", "DOWN"], ["UP", "UP", "RIGHT", "RIGHT"]])  # fmt: skip

ANSWER_ONLY = "<answer>\nAgent 0: RIGHT, DOWN, DOWN, RIGHT\nAgent 1: UP, UP, RIGHT, RIGHT\n</answer>"
WITH_THINK = (
    "<think>\nHoles: (1, 1)\nAgent 0: (0, 0) (0, 1) (1, 1) (2, 1) (2, 2)\nAgent 1: (2, 0) (1, 0) (0, 0) (0, 1) (0, 2)\n"
    "</think>\n" + ANSWER_ONLY
)


def verdict(failure: str | None, agent: int | None = None, t: int | None = None) -> Verdict:
    return Verdict("hand", failure is None, False, False, None, None, failure, agent, t, "")


def test_a_hole_is_located_at_the_faulty_move_of_the_answer_line():
    found = evaluate(INSTANCE, ANSWER_ONLY)
    assert (found.failure, found.failure_agent, found.failure_step) == ("hole", 0, 2)
    offset = fault_offset(ANSWER_ONLY, found)
    assert ANSWER_ONLY[:offset].endswith("Agent 0: RIGHT, ") and ANSWER_ONLY[offset:].startswith("DOWN, DOWN")


def test_a_think_block_path_moves_the_fault_to_the_cell_it_first_writes_wrong():
    found = evaluate(INSTANCE, WITH_THINK)
    offset = fault_offset(WITH_THINK, found)
    assert WITH_THINK[:offset].endswith("Agent 0: (0, 0) (0, 1) ") and WITH_THINK[offset:].startswith("(1, 1) (2, 1)")


def test_conflicts_and_unreached_goals_are_located_and_unplaceable_failures_are_not():
    text = "<answer>\nAgent 0: RIGHT, RIGHT\nAgent 1: UP, RIGHT\n</answer>"
    offset = fault_offset(text, verdict("vertex_conflict", 1, 2))
    assert text[offset:].startswith("RIGHT\n</answer>")
    offset = fault_offset(text, verdict("goal_not_reached", 1, 2))
    assert text[offset:].startswith("Agent 1: UP")
    assert fault_offset(text, verdict("off_grid", 0, 5)) == text.index("\nAgent 1")  # past its last move
    for unplaceable in (verdict(None), verdict("parse_error"), verdict("wrong_agents")):
        assert fault_offset(text, unplaceable) is None
    assert fault_offset("no answer", verdict("hole", 0, 1)) is None


def test_located_advantages_spare_the_correct_prefix_of_a_failing_answer():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(SHIPPED)
    ids = tokenizer(ANSWER_ONLY, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    def decode(part):
        return tokenizer.decode(part, skip_special_tokens=True)

    ends = token_ends(decode, ids)
    assert ends[-1] == len(decode(ids)) == len(ANSWER_ONLY)
    offset = fault_offset(ANSWER_ONLY, evaluate(INSTANCE, ANSWER_ONLY))
    advantages = located_advantages(-0.5, ends, offset)
    blamed = [k for k, a in enumerate(advantages) if a != 0.0]
    assert all(a == -0.5 for k, a in enumerate(advantages) if k in blamed)
    first = blamed[0]
    assert blamed == list(range(first, len(ids)))  # the fault and everything after it
    assert ANSWER_ONLY.startswith(decode(ids[:first])) and len(decode(ids[:first])) <= offset
    assert "DOWN" in decode(ids[first : first + 2])
    lifted = [k for k, a in enumerate(located_advantages(0.7, ends, offset)) if a != 0.0]
    assert lifted == list(range(first))  # a failing sample that beat its group: its correct prefix only
    assert located_advantages(-0.5, ends, None) == -0.5  # nothing to locate


def test_per_token_advantages_reach_the_micro_batch():
    batch = collate([[1, 2]], [[3, 4, 5]], [[0.0, 0.0, 0.0]], [[0.0, -1.0, -1.0]], pad_id=0)
    assert batch.advantages.tolist() == [[0.0, -1.0, -1.0]]
    batch = collate([[1, 2], [1]], [[3, 4, 5], [6]], None, [0.5, [-2.0]], pad_id=0)
    assert batch.advantages.tolist() == [[0.5, 0.5, 0.5], [-2.0, 0.0, 0.0]]


def test_entropy_of_the_response_positions_matches_the_softmax(tiny_model):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    batch = collate([[1, 7, 9]], [[12, 13]], None, None, pad_id=0)
    with torch.no_grad():
        _, entropy = token_logprobs(model, batch, entropy=True)
        logits = model(input_ids=torch.tensor([[1, 7, 9, 12, 13]])).logits[0, 2:4]
    expected = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)
    assert torch.allclose(entropy[0], expected, atol=1e-4) and (entropy > 0).all()
