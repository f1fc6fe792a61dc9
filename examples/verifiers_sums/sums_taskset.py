"""A verifiers 0.4 taskset (``import verifiers.v1 as vf``), written as for prime-rl: add two numbers.

``data.train: verifiers:examples/verifiers_sums/sums_taskset.py`` trains on it (configs/verifiers_sums.yaml); installed
as a package (``sums_taskset``), ``verifiers:sums-taskset`` names it. It ships no harness, so grpo-rollout's one-call
chat harness plays it; the two ``@vf.reward`` methods, weighted 1 and 0.2, are the reward.
"""

import random
import re

import verifiers.v1 as vf
from verifiers.v1.types import content_text

SYSTEM_PROMPT = "Answer with just the number."


class SumData(vf.TaskData):
    answer: str


class SumTask(vf.Task[SumData]):
    @vf.reward(weight=1.0)
    async def correct_answer(self, task, trace) -> float:
        found = re.findall(r"-?\d+", content_text(trace.last_message.content) or "")
        return float(bool(found) and found[-1] == task.answer)

    @vf.reward(weight=0.2)
    async def short_reply(self, task, trace) -> float:
        return float(len(content_text(trace.last_message.content) or "") <= 8)


class SumsConfig(vf.TasksetConfig):
    num_tasks: int = 64
    seed: int = 0


class Sums(vf.Taskset[SumTask, SumsConfig]):
    def load(self):
        rng = random.Random(self.config.seed)
        for _ in range(self.config.num_tasks):
            a, b = rng.randint(1, 9), rng.randint(1, 9)
            data = SumData(prompt=f"What is {a} + {b}?", system_prompt=SYSTEM_PROMPT, answer=str(a + b))
            yield SumTask(data, self.config.task)


__all__ = ["Sums"]
